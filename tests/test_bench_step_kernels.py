"""The step-kernels benchmark's pure parts (the timing itself needs a GPU: ``nova.bench.step_kernels``)."""
import pytest

from nova.bench.step_kernels import group_bytes, summarize
from nova.ir import Graph, TensorType


def _users(graph):
    users = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(id(v), []).append(n)
    return users


def test_a_group_moves_its_outside_operands_and_what_is_read_outside_it():
    g = Graph("chain")
    x = g.input(TensorType((64, 32), "f32"), "x", "data")
    y = g.input(TensorType((64, 32), "f32"), "y", "data")
    e = g.op("exp", x)
    s = g.op("add", e, y)
    t = g.op("mul", s, s)
    g.output(t, "t")
    g.output(g.op("neg", s), "u")
    nodes = list(g.nodes)
    users, outputs = _users(g), {id(o.value) for o in g.outputs}
    whole = 4 * 64 * 32
    # exp+add+mul as one group: reads x and y, writes s (read by neg outside) and t (returned); e stays inside
    assert group_bytes(nodes[:3], users, outputs) == 4 * whole
    assert group_bytes(nodes[:1], users, outputs) == 2 * whole            # exp alone: x in, e out


def test_the_summary_counts_the_band_and_the_ceiling():
    rows = [dict(group=0, kind="gemm", name="", model="gemm configurator", bound="tensor", predicted_us=10.0,
                 measured_us=11.0, ratio=1.1, bytes=0, tb_per_s=0.0, of_ceiling=0.0),
            dict(group=1, kind="pointwise", name="", model="pointwise configurator", bound="dram", predicted_us=5.0,
                 measured_us=8.0, ratio=1.6, bytes=int(4e12 * 8e-6), tb_per_s=4.0, of_ceiling=4.0 / 4.2),
            dict(group=2, kind="pointwise", name="", model="pointwise configurator", bound="launch", predicted_us=3.0,
                 measured_us=3.0, ratio=1.0, bytes=10, tb_per_s=0.0, of_ceiling=0.0),
            dict(group=3, kind="composite", name="", model="embedding configurator", bound="latency", predicted_us=9.0,
                 measured_us=8.0, ratio=9 / 8, bytes=int(2e6), tb_per_s=0.25, of_ceiling=0.06)]
    s = summarize(rows, 4.2)
    assert (s["within_band"], s["priced"]) == (3, 4)
    assert s["streaming_kernels"] == 1 and s["streaming_at_85pct"] == 1 and s["launch_bound_kernels"] == 2
    assert abs(s["streaming_of_ceiling"] - 4.0 / 4.2) < 1e-3
    assert s["by_model"]["pointwise configurator"] == {"kernels": 2, "within": 1, "measured_us": 11.0,
                                                       "predicted_us": 8.0}


def test_misses_repeated_in_every_layer_are_summed_by_description():
    """Eight launches 40 us over their prediction each (a layer's GEMM) outrank one launch 100 us over:
    the profile that found the epilogue GEMMs at 2x reads them first."""
    from nova.bench.step_kernels import render
    layer = [dict(group=i, kind="gemm", name="gemm 16384x512x512 tf32 NT +bias+residual -> f32",
                  model="gemm configurator", bound="dram", predicted_us=38.0, measured_us=78.0, ratio=78 / 38,
                  bytes=0, tb_per_s=1.3, of_ceiling=0.4) for i in range(8)]
    single = [dict(group=9, kind="rows", name="cross_entropy 8192x32768", model="rows configurator", bound="dram",
                   predicted_us=600.0, measured_us=700.0, ratio=700 / 600, bytes=0, tb_per_s=4.0, of_ceiling=0.95)]
    s = summarize(layer + single, 4.2)
    first = s["by_name"][0]
    assert first["kernels"] == 8 and first["measured_us"] - first["predicted_us"] == 320.0
    text = render({"model": "gpt42m", "batch": 32, "seq": 512, "device": "GPU", "launches": 9,
                   "ceiling_tbs": 4.2, "rows": layer + single, "summary": s})
    assert text.index("+bias+residual") < text.index("cross_entropy")


def test_cupti_activities_split_into_launches_at_the_markers():
    from nova.bench.step_kernels import split_at_markers
    spin = "void at::cuda::(anonymous namespace)::spin_kernel(long)"
    activities = [(spin, 1e5), (spin, 1.0), ("nova_prep", 3.0), ("nova_gemm", 20.0), ("nova_split_reduce", 2.0),
                  (spin, 1.0), (spin, 1.0), ("Memcpy DtoD (Device -> Device)", 4.0), (spin, 1.0)]
    launches = split_at_markers(activities, 3)
    assert [[n for n, _ in seg] for seg in launches] == [["nova_prep", "nova_gemm", "nova_split_reduce"], [],
                                                          ["Memcpy DtoD (Device -> Device)"]]
    import pytest
    with pytest.raises(RuntimeError, match="split into 3 launches, the program has 4"):
        split_at_markers(activities, 4)


def test_recipe_flags_are_checked_before_anything_runs(capsys):
    """``--autocast``/``--padded``/``--clip-grad-norm`` state the step as ``explain train`` does; a flag
    the model cannot take is one line, before torch or a GPU is asked for."""
    from nova.bench.step_kernels import main
    assert main(["--model", "llama42m", "--padded"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--padded" in err[0] and "llama42m" in err[0]


@pytest.mark.gpu
def test_the_copy_ceiling_is_measured_on_the_device():
    """The ceiling the memory-bound kernels are set against is the device's own copy rate (HBM3/3e: 2.5
    to 4.8 TB/s), not the H200's figure on every GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    from nova.bench.step_kernels import copy_ceiling_tbs
    assert 1.0 < copy_ceiling_tbs(torch, gib=0.25, copies=5) < 6.0


def test_a_launch_of_several_kernels_is_also_counted_kernel_by_kernel():
    """A column reduction and its final sum: as one launch 0.81 of the ceiling (the final sum's launch in
    its time); kernel by kernel the reduction streams at 0.87 and the final sum is launch-bound.  The CUPTI
    kernels are matched to the prediction's terms by entry point, whatever their order."""
    from nova.bench.step_kernels import each_kernel
    terms = [{"role": "column", "kernel": "nova_rows_column", "time_us": 25.8, "bytes": 100_663_296, "bound": "dram"},
             {"role": "column_final", "kernel": "nova_rows_column_final", "time_us": 1.8, "bytes": 3_151_872,
              "bound": "launch"}]
    row = dict(group=0, kind="reduction", name="column_reduce 16384x1536", model="rows configurator", bound="dram",
               predicted_us=27.6, measured_us=29.9, ratio=29.9 / 27.6, bytes=100_669_440, tb_per_s=3.37,
               of_ceiling=0.814, kernel_names=["nova_rows_column_final", "nova_rows_column"], kernel_us=[1.9, 28.0])
    row["kernels"] = each_kernel(row, terms, 4.14)
    assert [k["role"] for k in row["kernels"]] == ["column_final", "column"]
    assert row["kernels"][1]["of_ceiling"] == round(100_663_296 / 28e-6 / 1e12 / 4.14, 3)
    s = summarize([row], 4.14)
    assert (s["streaming_kernels"], s["streaming_at_85pct"]) == (1, 0)
    assert (s["device_kernels"], s["device_streaming"], s["device_streaming_at_85pct"], s["device_fixed_cost"]) == \
        (2, 1, 1, 1)
    other = dict(row, kernel_names=["nova_rows_column", "nova_rows_row_final"], kernel_us=[28.0, 1.9])
    assert each_kernel(other, terms, 4.14) is None                 # not the kernels the terms name
    assert each_kernel(dict(row, kernel_names=["nova_rows_column"], kernel_us=[28.0]), terms, 4.14) is None


def test_the_report_lists_the_dram_bound_kernels_below_the_ceiling():
    """The column reduction streams at 0.87 of the ceiling by itself and passes; a scatter-add's accumulate
    at 0.73 is listed with its launch's name; a launch-bound final sum is not listed."""
    from nova.bench.step_kernels import below_ceiling, render
    column = dict(group=0, kind="reduction", name="column_reduce 16384x1536", model="rows configurator",
                  bound="dram", predicted_us=27.6, measured_us=29.9, ratio=1.08, bytes=100_669_440, tb_per_s=3.37,
                  of_ceiling=0.814,
                  kernels=[{"role": "column", "kernel": "nova_rows_column", "measured_us": 28.0, "predicted_us": 25.8,
                            "bytes": 100_663_296, "bound": "dram", "of_ceiling": 0.868},
                           {"role": "column_final", "kernel": "nova_rows_column_final", "measured_us": 1.9,
                            "predicted_us": 1.8, "bytes": 3_151_872, "bound": "launch", "of_ceiling": 0.4}])
    scatter = dict(group=1, kind="composite", name="embedding scatter-add 16384x512", model="embedding configurator",
                   bound="dram", predicted_us=61.4, measured_us=79.3, ratio=1.29, bytes=167_903_232, tb_per_s=2.1,
                   of_ceiling=0.511,
                   kernels=[{"role": "accumulate", "kernel": "nova_embedding_accumulate", "measured_us": 55.6,
                             "predicted_us": 43.4, "bytes": 167_903_232, "bound": "dram", "of_ceiling": 0.729}])
    rows = [column, scatter]
    assert [(name, k["role"]) for name, k in below_ceiling(rows)] == [("embedding scatter-add 16384x512", "accumulate")]
    text = render({"model": "gpt42m", "batch": 32, "seq": 512, "device": "GPU", "launches": 2, "ceiling_tbs": 4.14,
                   "rows": rows, "summary": summarize(rows, 4.14)})
    assert "below 85% of the copy ceiling: 1" in text and "accumulate" in text and "0.73 of the ceiling" in text
