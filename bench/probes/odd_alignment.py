"""Odd-sized tile GEMMs: is the main kernel's miss the rows' alignment (K-major rows not whole 128-byte lines)
or the ragged edge tiles (M, N off the tile)?

    python3 bench/probes/odd_alignment.py --build      # host: every shape's kernels into $NOVA_CACHE_DIR (h200, h100)
    python3 bench/probes/odd_alignment.py              # GPU: nova.bench.kernel_profile over the shapes (CUPTI)
    python3 bench/probes/odd_alignment.py --large [--build]   # the large odd problems of run 86's draw (LARGE)

The held-out draws' odd tile problems (bench/results/h100-2026-12-06/run80-h100: odd-*.txt) run their main
kernel 1.6-1.9x above the model's main-kernel terms (the prep passes near theirs), while aligned problems
sit at 0.94-1.01.  Each family below is one held-out odd problem and its neighbours: K rounded up to whole
128-byte rows (32 TF32 / 64 BF16 elements), M and N rounded up to multiples of 64, and both; one call
each family, so the model's terms and the kernels' CUPTI times sit side by side.
"""
import sys

FAMILIES = {   # held-out problem: (M, N, K) variants, layout, dtype
    "1207x714x25836 NT tf32": ([(1207, 714, 25836), (1207, 714, 25856), (1216, 768, 25836), (1216, 768, 25856)],
                               "NT", "tf32"),
    "4714x4923x3914 NN tf32": ([(4714, 4923, 3914), (4714, 4923, 3936), (4736, 4928, 3914), (4736, 4928, 3936)],
                               "NN", "tf32"),
    "1767x1262x24985 TN tf32": ([(1767, 1262, 24985), (1767, 1262, 24992), (1792, 1280, 24985), (1792, 1280, 24992)],
                                "TN", "tf32"),
    "15047x391x5906 NN tf32": ([(15047, 391, 5906), (15047, 391, 5920), (15104, 448, 5906), (15104, 448, 5920)],
                               "NN", "tf32"),
    "1863x406x63541 TN bf16": ([(1863, 406, 63541), (1863, 406, 63552), (1920, 448, 63541), (1920, 448, 63552)],
                               "TN", "bf16"),
}


# the large odd problems still 18-27% under their predictions once K is padded to whole lines (run 86's
# draw, bench/results/h100-2026-12-06/run86-h100), each with M and N rounded up to multiples of 64
# beside it, and two aligned problems of the same draw as the control (`--large`)
LARGE = {
    "15221x6075x5757 NT tf32": ([(15221, 6075, 5757), (15232, 6080, 5757)], "NT", "tf32"),
    "1100x1459x1539 NN tf32": ([(1100, 1459, 1539), (1152, 1472, 1539)], "NN", "tf32"),
    "6464x4992x7424 TN tf32": ([(6464, 4992, 7424)], "TN", "tf32"),
    "7711x6797x5948 TN bf16": ([(7711, 6797, 5948), (7744, 6848, 5948)], "TN", "bf16"),
    "7614x7959x6463 NT bf16": ([(7614, 7959, 6463), (7616, 8000, 6463)], "NT", "bf16"),
    "2140x1829x2206 NN bf16": ([(2140, 1829, 2206), (2176, 1856, 2206)], "NN", "bf16"),
    "1900x2015x19329 TN bf16": ([(1900, 2015, 19329), (1920, 2048, 19329)], "TN", "bf16"),
    "4224x4608x3904 NN bf16": ([(4224, 4608, 3904)], "NN", "bf16"),
}


def families() -> dict:
    return LARGE if "--large" in sys.argv else FAMILIES


def shapes() -> dict:
    """{dtype: "MxNxK:LAYOUT,..."} in kernel_profile's --shapes form."""
    out = {}
    for variants, layout, dtype in families().values():
        out.setdefault(dtype, []).extend(f"{m}x{n}x{k}:{layout}" for m, n, k in variants)
    return {dtype: ",".join(v) for dtype, v in out.items()}


def build() -> None:
    from nova.bench.heldout import HeldoutGemm
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    from nova.runtime.matmul import precompile_gemms
    problems = [HeldoutGemm(i, "probe", layout, dtype, True, m, n, k).problem()
                for i, (variants, layout, dtype) in enumerate(families().values()) for m, n, k in variants]
    for target in ("h200", "h100"):
        print(target, precompile_gemms(problems, get_target(target), KernelCache(), log=lambda line: None))


def run() -> None:
    import os
    from nova.bench import kernel_profile
    out = os.environ.get("OUT", ".")
    for dtype, text in shapes().items():
        name = "odd-large" if "--large" in sys.argv else "odd-alignment"
        kernel_profile.main(["--shapes", text, "--dtypes", dtype, "--out", os.path.join(out, f"{name}-{dtype}")])


if __name__ == "__main__":
    build() if "--build" in sys.argv else run()
