"""Device measurement primitives shared by the benchmark, the correctness sweep, the oracle and the
profiles (needs torch and a GPU): fresh operands, float64 references, errors, CUDA-event timing, and
the SM clock and board power while something runs (``ClockSampler``: nvidia-smi).

Method (bench/NOTES.md, DEVELOPERS.md): fresh random inputs for every check (never zeros), the
output poisoned with NaN before Nova runs, relative Frobenius error against a float64 reference;
timing with CUDA events after warm-up, median of many runs, rotating input sets larger than L2 for
small shapes; per-call (synchronised, launch latency included), back-to-back (launch-overlapped) and
CUDA-graph replay (device time per call: the host's issue rate no longer bounds short kernels)
timing, and the host-side cost of one ``nova.matmul`` call.

Every shape is timed under sustained load: the H200 leaves idle at its 1980 MHz boost clock and
takes a second or so to settle where its 700 W cap holds it (~1400-1500 MHz for heavy GEMMs, up to
1980 MHz for light ones), so a shape timed right after a pause measured up to ~25% faster than the
same kernel timed later (bench/NOTES.md, v0.6).  ``settle`` runs both libraries back to back first.
"""
from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import subprocess
import threading
import time

from nova.dtypes import ELEMENT_TYPES, MODES, torch_dtype

# Relative Frobenius error vs float64 that a correct GEMM stays under, per mode (nova/dtypes.py)
TOLERANCE = {m: e.tolerance for m, e in MODES.items()}


def require_torch():
    """torch with a CUDA device and TF32 allowed for cuBLAS (the reference point), else ``NoGPUError``."""
    from nova.runtime.driver import NoGPUError
    try:
        import torch
    except ImportError:
        raise NoGPUError("benchmarks compare against torch.matmul, and torch is not installed") from None
    if not torch.cuda.is_available():
        raise NoGPUError("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = True     # cuBLAS TF32, the reference point
    torch.backends.cudnn.allow_tf32 = True
    return torch


def environment() -> dict:
    torch = require_torch()
    import nova
    from nova.kernels import registry
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nova": nova.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "abi": registry.abis()}


def rel_fro(c, ref) -> float:
    torch = require_torch()
    c64 = c.to(torch.float64)
    if torch.isnan(c64).any():
        return math.nan
    den = torch.linalg.norm(ref).item()
    num = torch.linalg.norm(c64 - ref).item()
    return num / den if den > 0 else num


def random_operands(torch, M, N, K, dtype, gen, trans_a=False, trans_b=False):
    """Fresh ``randn`` operands A [M, K] and B [K, N] of GEMM mode ``dtype`` on the GPU; a transposed
    operand is the ``.T`` view of a row-major [K, M] (resp. [N, K]) matrix."""
    tdt = torch_dtype(torch, dtype)
    a = torch.randn((K, M) if trans_a else (M, K), device="cuda", generator=gen).to(tdt)
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda", generator=gen).to(tdt)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def random_bias(torch, N, dtype, gen):
    """A fresh ``randn`` bias of length N in torch dtype ``dtype`` (the operands' storage)."""
    return torch.randn(N, device="cuda", generator=gen).to(dtype)


def nan_output(torch, M, N, storage):
    """An [M, N] output of element type ``storage`` filled with NaN: whatever a kernel leaves unwritten shows."""
    return torch.full((M, N), float("nan"), device="cuda", dtype=torch_dtype(torch, storage))


def tf32_round(torch, x):
    """cvt.rna.tf32.f32 emulation: round the 13 low mantissa bits to nearest, ties away from zero."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).reshape(x.shape)


def apply_activation(torch, x, name):
    if name == "relu":
        return torch.relu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if name == "gelu_erf":
        return torch.nn.functional.gelu(x)
    if name == "silu":
        return torch.nn.functional.silu(x)
    return x


def reference(torch, a, b, bias=None, activation="none"):
    """``act(a @ b + bias)`` in float64."""
    ref = a.to(torch.float64) @ b.to(torch.float64)
    if bias is not None:
        ref = ref + bias.to(torch.float64)
    return apply_activation(torch, ref, activation)


def check_case(M, N, K, dtype, *, seed, bias=False, activation="none", trans_a=False, trans_b=False) -> dict:
    """One correctness check: fresh random data, NaN-poisoned output, float64 reference.

    An error above ``TOLERANCE`` passes only if the kernel reproduces the exact product of its
    rounded inputs within the output storage's ``exact_tolerance`` (nova/dtypes.py): that happens
    for tiny outputs with cancellation, e.g. 1x1x127, where |c| << ||a||*||b||."""
    import nova
    torch = require_torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = random_operands(torch, M, N, K, dtype, gen, trans_a, trans_b)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
    bias_t = random_bias(torch, N, a.dtype, gen) if bias else None
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b, "bias": bias,
           "activation": activation}
    try:
        nova.matmul(a, b, out=out, bias=bias_t, activation=activation)
        torch.cuda.synchronize()
    except Exception as e:   # recorded, not hidden: the sweep fails on any error
        return {**row, "error": math.nan, "nan_count": -1, "ok": False, "failure": f"{type(e).__name__}: {e}"}
    nan_count = int(torch.isnan(out).sum().item())
    err = rel_fro(out, reference(torch, a, b, bias_t, activation)) if nan_count == 0 else math.nan
    # The same product on the inputs as the tensor cores see them (TF32 round-to-nearest; bf16/fp16
    # inputs are exact): what is left is accumulation and output rounding only.
    qa, qb = (tf32_round(torch, a), tf32_round(torch, b)) if dtype == "tf32" else (a, b)
    err_q = rel_fro(out, reference(torch, qa, qb, bias_t, activation)) if nan_count == 0 else math.nan
    exact = ELEMENT_TYPES[MODES[dtype].storage].exact_tolerance
    ok = nan_count == 0 and (err <= TOLERANCE[dtype] or err_q <= exact)
    if nan_count:
        failure = f"{nan_count} outputs never written (NaN)"
    elif ok:
        failure = "" if err <= TOLERANCE[dtype] else "accepted: cancellation (error is the inputs' TF32 rounding)"
    else:
        failure = "error above tolerance"
    return {**row, "error": err, "error_vs_rounded_inputs": err_q, "nan_count": nan_count, "ok": ok,
            "failure": failure}


# ------------------------------------------------------------------------------ timing
def median_events(torch, fn, reps: int) -> float:
    """Per-call: each call synchronised and bracketed by events (includes launch latency). Median, us."""
    times = []
    for i in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def back_to_back(torch, fn, reps: int, rounds: int = 5) -> float:
    """Launch-overlapped: ``reps`` calls queued between two events; median over rounds of the mean, us."""
    means = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(reps):
            fn(i)
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(means)


def graph_replay(torch, fn, reps: int, rounds: int = 5, min_seconds: float = 0.0,
                 settle_s: float = 0.0) -> tuple[float, tuple]:
    """Device time per call: ``reps`` calls captured in one CUDA graph, replayed back to back (~50 ms
    of replays, at most 16, queued between synchronisations) until at least ``rounds`` replays and ``min_seconds``
    of wall time; the median over replays of the mean per call, us, and the (start, end) wall-clock
    window of the timed replays (to join with clock samples).  The calls are warmed up on the
    capture stream first (Nova keeps per-stream plans and per-pointer tensor maps; capture must
    not allocate).  ``settle_s``: seconds of untimed replays first, so a heavy kernel is timed at the
    clock the GPU holds at its power cap (it falls from the boost clock over ~1.5 s: bench/NOTES.md, v0.6)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(reps):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(reps):
            fn(i)
    t_replay = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    t_replay = time.perf_counter() - t_replay
    chunk = max(1, min(16, int(0.05 / max(t_replay, 1e-6))))    # ~50 ms queued per synchronisation
    t_settle = time.time()
    while time.time() - t_settle < settle_s:
        for _ in range(chunk):
            graph.replay()
        torch.cuda.synchronize()
    means, t0 = [], time.time()
    while len(means) < rounds or time.time() - t0 < min_seconds:
        events = []
        for _ in range(chunk):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            events.append((start, end))
        events[-1][1].synchronize()
        means += [a.elapsed_time(b) * 1e3 / reps for a, b in events]
    window = (t0, time.time())
    del graph
    return statistics.median(means), window


def cold_graph_replay(torch, fn, reps: int, flush_bytes: int, settle_s: float = 0.0) -> tuple[float, tuple]:
    """Device time per call with the L2 cold: ``reps`` calls each after a write of ``flush_bytes``
    (a scratch buffer filled: it evicts the L2 and its dirty lines go back to DRAM), captured in one
    CUDA graph, less the same graph of the fills alone (``graph_replay`` each).  What a call costs
    where other work ran between calls (a model's other layers), not back to back with its operands
    left in the L2 by the call before."""
    scratch = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")

    def flush(i):
        scratch.fill_(i % 251)

    def flushed(i):
        flush(i)
        fn(i)
    both, window = graph_replay(torch, flushed, reps, settle_s=settle_s)
    alone, _ = graph_replay(torch, flush, reps)
    return both - alone, window


def settle(torch, fns, seconds: float, sync=None) -> int:
    """Run ``fns`` round-robin, back to back, for ``seconds`` of wall time (synchronising every few
    milliseconds so the queue stays short): the GPU reaches the clock it holds under sustained load
    before anything is timed.  ``sync`` waits for all of them (default ``torch.cuda.synchronize``;
    a library on its own stream adds its wait).  Returns the number of calls."""
    sync = sync or torch.cuda.synchronize
    sync()
    t_end, calls = time.perf_counter() + seconds, 0
    while time.perf_counter() < t_end:
        for _ in range(8):
            for fn in fns:
                fn(calls)
            calls += 1
        sync()
    return calls


def wall_per_call(fn, sync, reps: int) -> float:
    """Back-to-back by the host's wall clock: ``reps`` calls of ``fn`` between two ``sync()`` (a
    device synchronisation that also waits for a library's own stream), microseconds per call.
    Events recorded on torch's stream would not see work that another library (XLA) queues on its
    own stream; the wall clock times every library the same way."""
    sync()
    t0 = time.perf_counter()
    for i in range(reps):
        fn(i)
    sync()
    return (time.perf_counter() - t0) / reps * 1e6


def geomean(values) -> float:
    """Geometric mean of the positive, non-NaN ``values`` (NaN when none)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(v) and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


def host_overhead(torch, fn, reps: int = 200) -> float:
    """Host-side microseconds per call (no synchronisation inside the loop)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(reps):
        fn(i)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / reps * 1e6


class ClockSampler:
    """SM clock, board power and temperature from ``nvidia-smi -lms``, each line stamped with
    ``time.time()`` as it arrives.  Does nothing where nvidia-smi is absent."""

    def __init__(self, interval_ms: int = 100):
        self.interval_ms = interval_ms
        self.samples: list[tuple[float, float, float, float]] = []
        self.proc = None
        self.thread = None

    def start(self):
        if not shutil.which("nvidia-smi"):
            return self
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        cmd = ["nvidia-smi", "-i", gpu, "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
               "--format=csv,noheader,nounits", "-lms", str(self.interval_ms)]
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            sample = self.parse(line, time.time())
            if sample is not None:
                self.samples.append(sample)

    @staticmethod
    def parse(line: str, now: float):
        """``(unix time, sm MHz, power W, temperature C)`` from one line; the time is nvidia-smi's
        own stamp (its output to a pipe may arrive in bursts), else ``now``."""
        import datetime

        def num(text):
            try:
                return float(text)
            except ValueError:       # "[N/A]" and the like
                return None
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or num(parts[1]) is None:
            return None
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            t = now
        return (t, num(parts[1]), num(parts[2]), num(parts[3]))

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.thread.join(timeout=5)
        return self

    def summary(self, windows: list[tuple[float, float]], t0: float) -> dict | None:
        if not self.samples:
            return None
        inside = [s for s in self.samples if any(a <= s[0] <= b for a, b in windows)]
        med = (lambda xs: statistics.median(xs) if xs else None)
        return {"interval_ms": self.interval_ms, "timed_samples": len(inside),
                "timed_sm_mhz_median": med([s[1] for s in inside]),
                "timed_sm_mhz_min": min((s[1] for s in inside), default=None),
                "timed_sm_mhz_max": max((s[1] for s in inside), default=None),
                "timed_power_w_median": med([s[2] for s in inside if s[2] is not None]),
                "first_sm_mhz": self.samples[0][1],
                "trace": {"t_s": [round(s[0] - t0, 3) for s in self.samples],
                          "sm_mhz": [s[1] for s in self.samples], "power_w": [s[2] for s in self.samples],
                          "temp_c": [s[3] for s in self.samples]}}
