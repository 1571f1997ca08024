"""The hardware model: sourced quantities, derived figures computed (not typed), from_device."""
import math
from types import SimpleNamespace

import pytest

from nova.hwmodel import PRESETS, TargetError, get_target, model_from_attributes
from nova.hwmodel.formula import Formula, formulas


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_quantity_has_a_source_and_unit(name):
    gpu = PRESETS[name]
    for key, q in gpu.q.items():
        assert q.source.strip(), f"{name}.{key} has no source"
        assert q.unit.strip(), f"{name}.{key} has no unit"
        assert q.value > 0, f"{name}.{key} must be positive"


def test_required_quantities_present():
    required = {"sm_count", "clock_hz", "fp32_lanes_per_sm", "smem_per_sm", "smem_per_block", "regs_per_sm",
                "max_regs_per_thread", "max_threads_per_sm", "max_blocks_per_sm", "warp_schedulers_per_sm",
                "l2_bytes", "dram_bw", "l2_bytes_per_clk", "smem_bytes_per_clk_sm"}
    for gpu in PRESETS.values():
        assert required <= set(gpu.q), f"{gpu.name} misses {required - set(gpu.q)}"
        for dt in ("tf32", "bf16", "fp16"):
            assert gpu.supports("mma.sync", dt)


def test_datasheet_peaks_are_reproduced_from_primary_quantities():
    # Dense peaks quoted in reference-facts.md / datasheets, recomputed from per-SM rates x SMs x clock.
    assert PRESETS["rtx3060"].peak_flops("tf32") / 1e12 == pytest.approx(12.7, rel=0.01)
    assert PRESETS["rtx3060"].peak_flops("bf16") / 1e12 == pytest.approx(25.5, rel=0.01)
    assert PRESETS["rtx3060"].peak_fp32_flops() / 1e12 == pytest.approx(12.74, rel=0.01)
    assert PRESETS["h200"].peak_flops("tf32") / 1e12 == pytest.approx(494.7, rel=0.005)
    assert PRESETS["h200"].peak_flops("bf16") / 1e12 == pytest.approx(989.4, rel=0.005)
    assert PRESETS["a100"].peak_flops("tf32") / 1e12 == pytest.approx(156, rel=0.01)
    assert PRESETS["rtx4090"].peak_flops("bf16") / 1e12 == pytest.approx(165.2, rel=0.01)


def test_machine_balance_is_peak_over_bandwidth():
    g = PRESETS["rtx3060"]
    # reference-facts.md: ridge ~35 FLOP/B for TF32 at 360 GB/s
    assert g.balance("tf32", "dram") == pytest.approx(35.4, rel=0.01)
    h = PRESETS["h200"]
    assert h.balance("bf16", "dram") == pytest.approx(989.4e12 / 4.8e12, rel=1e-3)
    # Hopper: wgmma is the best family; mma.sync is modeled slower
    assert h.best_family("tf32") == "wgmma"
    assert h.peak_flops("tf32", "mma.sync") < h.peak_flops("tf32", "wgmma")


def test_get_target_errors_name_the_presets():
    with pytest.raises(TargetError, match="rtx3060"):
        get_target("voodoo5")
    assert get_target("H200") is PRESETS["h200"]


def test_from_device_without_gpu_is_a_clear_error(monkeypatch):
    from nova.hwmodel import from_device
    try:
        gpu = from_device()
    except TargetError as e:
        assert "preset" in str(e) and "h200" in str(e)
    else:  # running on a GPU machine
        assert gpu.sm_count > 0


def test_model_from_attributes_h200_matches_preset_family():
    attrs = dict(sm_count=132, clock_khz=1980000, mem_clock_khz=3201000, bus_width_bits=6144,
                 l2_bytes=60 * 2**20, smem_per_sm=233472, smem_per_block=232448, regs_per_sm=65536,
                 max_threads_per_sm=2048, max_blocks_per_sm=32)
    g = model_from_attributes("NVIDIA H200", (9, 0), attrs)
    assert g.arch == "sm_90" and g.sm_count == 132
    assert g.dram_bw == pytest.approx(2 * 3201e6 * 6144 / 8)
    assert g.tc_flops_per_clk_sm("wgmma", "tf32") == PRESETS["h100"].tc_flops_per_clk_sm("wgmma", "tf32")
    with pytest.raises(TargetError, match="compute capability 7.5"):
        model_from_attributes("Tesla T4", (7, 5), attrs)


def test_formula_shows_and_evaluates():
    f = Formula("tiles", "ceil(M / block_m) * ceil(N / block_n)")
    assert f(M=1000, N=33, block_m=128, block_n=32) == 8 * 2
    assert "ceiling(M/block_m)" in f.symbolic()
    assert f.substituted(M=1000, N=33, block_m=128, block_n=32) == "ceiling(1000/128)*ceiling(33/32)"
    g = Formula("x", "sqrt(a) + floor(b)")
    assert g(a=16, b=2.7) == 6
    with pytest.raises(KeyError):
        g(a=1)
    assert math.isclose(Formula("e", "E * 2")(E=1.5), 3.0)   # E is a symbol, not Euler's number
    assert Formula("w", "1e-9 * latency_ns").params == ("latency_ns",)


def test_formula_table():
    """``formulas``: one ``name = expression`` a line, deeper-indented lines continue the one above,
    comments and blank lines skipped; each formula by its name."""
    f = formulas("""
        # occupancy
        slots = sm_count * blocks_per_sm
        t = Max(a, b) / achieved
            + fixed * blocks        # continued
    """)
    assert f.slots == Formula("slots", "sm_count * blocks_per_sm")
    assert f.t.text == "Max(a, b) / achieved + fixed * blocks"
    assert sorted(vars(f)) == ["slots", "t"]
    with pytest.raises(ValueError, match="defined twice"):
        formulas("x = a\nx = b")
    with pytest.raises(ValueError, match="is not 'name = expression'"):
        formulas("x + 1")


def test_formulas_evaluate_exactly_as_sympy_prints_them():
    """A formula is evaluated from its text without sympy; the text is written in the operation order
    of sympy's printed form, so both give the same bits (what the derivation shows is what decides)."""
    import random

    import sympy

    import nova.kernels.gemm.cost
    import nova.kernels.gemm.ampere
    import nova.kernels.gemm.hopper
    import nova.kernels.gemm.skinny
    import nova.kernels.gemm.space
    import nova.hwmodel.model
    def formulas_of(module):          # its Formula constants and the formulas of its tables (``formulas``)
        for v in vars(module).values():
            if isinstance(v, Formula):
                yield v
            elif isinstance(v, SimpleNamespace):
                yield from (f for f in vars(v).values() if isinstance(f, Formula))
    formulas = {id(f): f for mod in (nova.kernels.gemm.cost, nova.kernels.gemm.ampere, nova.kernels.gemm.hopper,
                                     nova.kernels.gemm.skinny, nova.kernels.gemm.space, nova.hwmodel.model)
                for f in formulas_of(mod)}.values()
    assert len(formulas) > 40
    rng = random.Random(10)
    for f in formulas:
        lambdified = sympy.lambdify([sympy.Symbol(p) for p in f.params], f.expr,
                                    modules=[{"ceiling": math.ceil, "floor": math.floor, "Min": min, "Max": max}, "math"])
        for _ in range(500):
            values = {p: rng.randint(1, 5000) if rng.random() < 0.5 else rng.uniform(1, 1e4) for p in f.params}
            ours, theirs = f(**values), lambdified(*(values[p] for p in f.params))
            assert (ours, type(ours)) == (theirs, type(theirs)), (f.name, values)
