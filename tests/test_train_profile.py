"""nova.bench.train_profile's accounting of the device's idle time between kernels (CPU)."""
from nova.bench.train_profile import gaps


def test_gaps_between_kernels_by_the_kernel_that_waited():
    # two steps of three kernels: 2 us after the GEMM, 3 us after the rows kernel, an overlap (0),
    # and 10 us between the steps
    kernels = [(0, 10, "gemm"), (12, 20, "rows"), (23, 30, "gemm"),
               (40, 50, "gemm"), (52, 60, "rows"), (55, 70, "gemm")]
    g = gaps(list(reversed(kernels)), steps=2)
    assert g["per_step_us"] == (2 + 3 + 10 + 2 + 0) / 2 and g["count_per_step"] == 2.5
    assert g["by_next"]["rows"] == {"us_per_step": 2.0, "count_per_step": 1.0, "mean_us": 2.0}
    assert g["by_next"]["gemm"]["us_per_step"] == 6.5 and g["by_next"]["gemm"]["count_per_step"] == 1.5
    assert g["median_us"] == 2 and g["p90_us"] == 10 and g["span_us"] == 35
    assert gaps([], 1)["per_step_us"] == 0
