"""Every device allocation a CUDA program of a plan makes besides the values' arena bytes, with its
size: the allocations outside the arena, which the memory plan adds to the arena and the user-owned
tensors so that ``MemoryPlan.peak_bytes`` is the whole step's predicted peak
(``nova.passes.memory.with_outside``; a budget reserves it), and the launch workspaces, which the plan
places in the arena (``nova.passes.memory.place_workspaces``).

    from nova.compiler.outside_arena import account
    items = account(planned)              # [OutsideAllocation | LaunchWorkspace], the meta program's, no GPU
    pipeline(graph, target, outside_arena=account)   # the plan states them (plan_cache, explain do)

Found by building the program on the meta device (``executor.Program(planned, "meta")``, the CUDA
program's layout and launches) and reading its allocation sites:

* **launch workspaces** (``LaunchWorkspace``, placed in the arena, live while their group's launch
  runs): what a group's kernels write and read within the launch, from
  ``KernelContext.launch_workspace`` on the meta program: a Nova GEMM launch's operand-prep copies and
  split-K/stream-K partials (``gemm_lowering.workspace_bytes``: ``nova/runtime/tma.py``'s layout of the
  schedule the configurator picks for the plan's target), a rows kernel's per-row losses and partial
  sums, the embedding backward's sort buffers.  One per group, the largest its kernels ask for.
* **program** (allocated at build, live as long as the program): the executor's byte areas other
  than the arena (``constants``; ``staged`` slots the data inputs are copied into; ``scratch`` for
  values the plan gives no bytes; the temporary each constant is computed in before its copy, at
  build, counted like a launch's), and every static workspace the launches take from
  ``KernelContext.workspace`` (contents that outlive a launch: the multi-tensor kernels' argument
  tables, the multi-tensor sum's partials and its completion counter (zero between launches), padded
  log-sum-exp; the ATen fallbacks' cross-entropy chunk workspace), each named by its
  group.  cuBLAS's workspace (``TORCH_CUBLAS_WORKSPACE_BYTES``) once when any matmul falls back to
  ``torch.matmul``.
* **launch** (allocated and freed while one launch runs; the largest counts): the temporaries of
  ATen-fallback kernels, found by running each launch on meta under ``AllocationTracker`` (a
  dispatch mode that follows every new storage until it is freed, and counts the result an
  ``out=`` overload without a kernel of its own computes before copying it out, and the CUDA scratch
  a call makes that its meta kernel does not, ``cuda_scratch``: ATen memory-efficient attention's
  backward workspace and its forward's 16-bit output accumulator); Nova attention's
  launcher (``nova/kernels/attention/launch.py``: the backward's FP32 ``delta`` row vector, the FP32
  partials of a split kernel (``partial_sizes``) and the dense copies of the operands it cannot address,
  ``plan_operands``), in closed form because its launch cannot run on meta.
* **step**: the outputs ``Program.run`` returns as fresh clones (the loss).

Sizes are rounded as PyTorch's caching allocator counts them (``TORCH_BLOCK_BYTES``).  What is not
here: the user's own tensors (parameters, optimizer state, data: ``external`` in the plan; optimizer
state the first step creates is allocated by the write-back's bindings before the program runs), the
mirrors ``ProgramEngine`` makes of inputs the user keeps on the host (one 256-byte row per CPU step
count and hyper-parameter vector), the CUDA graph's private pool (it holds what the capture allocates:
the launch temporaries above, counted once), and the CUDA context, kernels' code and tensor maps (not
allocations of tensor memory).  ``docs/memory.md`` lists every allocation of a compiled step.
``RUN_TIME_SITES`` lists the allocation sites of code that runs at launch time and that the meta
run cannot execute; ``tests/test_outside_arena.py`` fails when such a site is added and not listed.
"""
from __future__ import annotations

from nova.passes.memory import LaunchWorkspace, OutsideAllocation

TORCH_BLOCK_BYTES = 512                 # PyTorch's caching allocator rounds every block to 512 bytes
TORCH_CUBLAS_WORKSPACE_BYTES = 32 << 20  # cuBLAS workspace per stream on sm_90 (torch's default config
                                        # ":4096:8": 8 x 4 MiB, CUDABlasHandlePool.cpp)

# allocation sites in code that runs at launch time, beyond the meta run's reach, each accounted
# here in closed form: (module path, function) -> where
RUN_TIME_SITES = {
    ("nova/kernels/attention/launch.py", "_dense"): "operand copies (attention_copies)",
    ("nova/kernels/attention/launch.py", "_output"): "output copies (attention_copies)",
    ("nova/kernels/attention/launch.py", "_bias_copy"): "bias copy (attention_copies)",
    ("nova/kernels/attention/launch.py", "attention"): "lse when not given: the executor gives it",
    ("nova/kernels/attention/launch.py", "attention_backward"): "delta (attention_copies)",
    ("nova/kernels/attention/launch.py", "split_launch"): "a split kernel's FP32 partials (attention_copies)",
    ("nova/kernels/embedding/launch.py", "run"): "per-call workspace: the executor's launcher takes ctx.workspace",
    ("nova/kernels/embedding/launch.py", "embedding_forward"): "out: the executor passes the arena view",
    ("nova/kernels/embedding/launch.py", "embedding_backward"): "grad: the executor passes the arena view",
    ("nova/kernels/optimizer/launch.py", "bind"): "argument table: the executor passes ctx.workspace",
    ("nova/kernels/optimizer/sum_launch.py", "bind"): "argument table and partials: the executor passes ctx.workspace",
    ("nova/runtime/tma.py", "workspace"): "GEMM prep and split-K workspaces of calls without one: the executor "
                                          "passes each launch its workspace in the arena (launch workspaces)",
    ("nova/runtime/tma.py", "_to_device"): "device copies of TMA tensor maps: 128 bytes each, not tensor memory",
    ("nova/runtime/matmul.py", "matmul"): "out when not given: the executor gives it",
}


def block_bytes(nbytes: int) -> int:
    """Bytes PyTorch's caching allocator counts for an allocation of ``nbytes``."""
    return -(-max(nbytes, 1) // TORCH_BLOCK_BYTES) * TORCH_BLOCK_BYTES


def account(planned, target=None, *, per_call: bool = False, in_place=frozenset()) -> list:
    """Every allocation outside the arena of ``planned``'s CUDA program (``OutsideAllocation``) and
    every launch workspace its groups take (``LaunchWorkspace``), rules in the module docstring;
    ``target``: the GPU whose schedules size the workspaces (default the plan's, else h200);
    ``per_call``, ``in_place``: the program's options (``executor.build``: no static slot for an
    input read in place, outputs of the output region handed over rather than cloned)."""
    from nova.compiler.executor import Program
    program = Program(planned, "meta", target=target if target is not None else planned.target,
                      per_call=per_call, in_place=in_place)
    items: list = [LaunchWorkspace(group, nbytes, what)
                   for group, (nbytes, what) in sorted(program.launch_workspaces().items())]
    names = {"const": "constants (constant/iota results, filled once)",
             "staged": "static slots of the data inputs (copied in each step)",
             "scratch": "scratch for values the plan gives no bytes"}
    for area, what in names.items():
        if program.area_bytes[area]:
            items.append(OutsideAllocation(what, block_bytes(program.area_bytes[area]), "program"))
    constants = [n.outputs[0].type.nbytes for n in planned.graph.nodes if n.op in ("constant", "iota")]
    if constants:
        items.append(OutsideAllocation("the temporary a constant is computed in at build (the largest)",
                                       block_bytes(max(constants)), "launch"))
    for group, t in program.workspace_owners():
        what = f"workspace {list(t.shape)} {str(t.dtype).replace('torch.', '')} of group {group}"
        items.append(OutsideAllocation(what, block_bytes(t.numel() * t.element_size()), "program"))
    items += skinny_workspaces(program, target if target is not None else planned.target)
    if program.stats["torch_gemms"]:
        items.append(OutsideAllocation("cuBLAS workspace (matmuls on torch.matmul)", TORCH_CUBLAS_WORKSPACE_BYTES,
                                       "program"))
    for index, launch in enumerate(program.launches):
        nbytes = launch_temporaries(launch)
        if nbytes:
            ops = "+".join(n.op for n in launch.nodes)
            items.append(OutsideAllocation(f"temporaries of launch {index} (group {launch.group}, {ops[:40]})",
                                           nbytes, "launch"))
    for o in planned.graph.outputs:
        if program.returns_clone(o):
            items.append(OutsideAllocation(f"output {o.name!r} returned as a clone", block_bytes(o.value.type.nbytes),
                                           "step"))
    return items


# ------------------------------------------------------------------ skinny GEMMs
def skinny_workspaces(program, target) -> list[OutsideAllocation]:
    """One entry per distinct skinny GEMM that splits K over CTAs: its K-slice partials and ticket
    counters (``SkinnySchedule.workspace_bytes``), which ``nova/runtime/skinny.py`` allocates once per
    stream by ``cuMemAlloc`` with the counters zeroed (the kernel resets them): not an arena slice,
    whose bytes other values reuse."""
    from nova.configurator import configure
    from nova.hwmodel import get_target
    gpu = get_target(target if target is not None else "h200")
    out = []
    for problem in program.gemm_problems():
        s = configure(problem, gpu).schedule
        if s.kernel == "skinny" and s.split:
            out.append(OutsideAllocation(f"GEMM workspace of {problem.describe()} (skinny kernel's K slices)",
                                         s.workspace_bytes(problem.M, problem.N), "program", "driver"))
    return out


# ------------------------------------------------------------------ one launch's temporaries
def launch_temporaries(launch) -> int:
    """The most bytes ``launch``'s kernels hold at once outside the tensors bound to them: Nova
    attention's launcher in closed form, every other kernel run on meta under ``AllocationTracker``
    (Nova GEMMs, rows, embedding, pointwise and optimizer kernels allocate nothing when they run)."""
    import torch
    from nova.compiler.collectives import CollectiveError
    from nova.compiler.plan_view import ExecutorError
    peak = 0
    for kernel in launch.kernels:
        if kernel.attention is not None:
            peak = max(peak, attention_copies(kernel))
            continue
        if any(x is not None for x in (kernel.rows, kernel.embedding, kernel.pointwise, kernel.optimizer,
                                       kernel.multi_sum)):
            continue
        tracker = AllocationTracker()
        try:
            with torch.no_grad(), tracker:
                kernel.run()
        except ExecutorError:          # a Nova GEMM's placeholder: its workspace is a launch workspace
            continue
        except CollectiveError:        # a collective planned without a process group (explain --gpus)
            continue
        peak = max(peak, tracker.peak)
    return peak


def attention_copies(kernel) -> int:
    """Bytes Nova attention's launcher allocates while it runs: the dense copy of each operand it
    cannot address (``plan_operands``'s ``copies``, named in the kernel's description), the FP32
    partials of a split kernel (``Kernel.partials``) and, in the backward, the FP32 ``delta`` row vector
    [B, H, Tq] (and a dense lse when the given one is strided)."""
    problem, roles = kernel.attention
    copied = kernel.copied if kernel.copied is not None else {}
    nbytes = sum(block_bytes(n) for n in copied.values()) + (block_bytes(kernel.partials) if kernel.partials else 0)
    if "bwd_pre" in roles:
        nbytes += block_bytes(problem.batch * problem.heads * problem.seq_q * 4)
    return nbytes


def AllocationTracker():
    """A dispatch mode following the storage of every tensor its calls create on meta until it is
    freed: ``peak`` is the most bytes alive at once (blocks as PyTorch's allocator counts them).  An
    ``out=`` overload without a kernel of its own computes into a temporary of its outputs' size
    before copying (``aten_launches._has_own_kernel``), counted for the call."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from nova.compiler.aten_launches import _has_own_kernel, _tensors

    class Tracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict[int, tuple] = {}
            self.peak = 0

        def _alive(self) -> int:
            self.live = {k: (ref, n) for k, (ref, n) in self.live.items() if not ref.expired()}
            return sum(n for _, n in self.live.values())

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            given = {t.untyped_storage()._cdata for t in _tensors((args, kwargs))}
            extra = cuda_scratch(func, args)
            if any(a.is_out for a in func._schema.arguments) and not _has_own_kernel(func):
                extra = sum(block_bytes(t.numel() * t.element_size()) for t in _tensors(out))
            for t in _tensors(out):
                storage = t.untyped_storage()
                key = storage._cdata
                if key in given or key in self.live or t.device.type != "meta":
                    continue
                self.live[key] = (StorageWeakRef(storage), block_bytes(storage.nbytes()))
            self.peak = max(self.peak, self._alive() + extra)
            return out

    return Tracker()


# ------------------------------------------------------------------ ATen's CUDA scratch the meta run cannot see
def efficient_attention_backward_scratch(grad_out, query, key, value, *rest) -> int:
    """Bytes ``aten._scaled_dot_product_efficient_attention_backward`` allocates on CUDA inside the call
    besides its three gradients (which the meta run holds): PyTorch's memory-efficient (CUTLASS)
    backward, ``attention_backward.cu`` and ``mem_eff_attention/kernel_backward.h`` (torch 2.11; each
    case measured on an H100: bench/results/h100-2026-12-06/mem-eff-attention-allocs/allocations.txt, 25
    shapes and dtypes, and run84-h100/chunked_loss_memory.txt).

    With B, H, M, N, D, Dv the batch, heads, query and key lengths and head sizes, the kernel's blocks
    I x J: FP32 64x64 for D <= 64, else 128x64; 16-bit 64x64 for D <= 64, 128x128 for D <= 128, else
    128x64 (dK/dV then accumulate in the workspace: D > 128 in 16 bits).  Key splits S = ceil(N / J),
    1 when B*H >= 256 and N <= 2J, at most floor(200 / (B*H)) when dK/dV accumulate, at least 1.
    Floats per (b, h): gq = ceil(M/I) ceil(D/J) (I J + 4), plus S J roundup(D, I) and S J roundup(Dv, I)
    when dK/dV accumulate, the sum rounded up to 4; the workspace is B H x that x 4 bytes.  Before it:
    delta, 4 B H M bytes (FP32: the product dO * O, 4 B M H Dv, and its row sum, copied once more with
    H > 1, freed before the workspace); a contiguous [B, M, H, Dv] copy of dO unless it is one already."""
    import torch
    B, H, M, D = query.shape
    N, Dv = key.shape[2], value.shape[3]
    half = query.dtype != torch.float32
    if half:
        I, J = (64, 64) if D <= 64 else ((128, 128) if D <= 128 else (128, 64))
    else:
        I, J = (64, 64) if D <= 64 else (128, 64)
    accumulate = half and D > 128
    splits = -(-N // J)
    if B * H >= 256 and N <= 2 * J:
        splits = 1
    if accumulate:
        splits = min(splits, 200 // (B * H))
    splits = max(splits, 1)
    roundup = lambda x, m: -(-x // m) * m       # noqa: E731
    per_head = -(-M // I) * -(-D // J) * (I * J + 4)
    if accumulate:
        per_head += splits * J * (roundup(D, I) + roundup(Dv, I))
    workspace = block_bytes(B * H * roundup(per_head, 4) * 4)
    delta = block_bytes(4 * B * H * M)
    before = 0 if half else block_bytes(4 * B * M * H * Dv) + delta * (2 if H > 1 else 1)
    copy = 0 if grad_out.transpose(1, 2).is_contiguous() else block_bytes(grad_out.numel() * grad_out.element_size())
    return copy + max(before, delta + workspace)


def efficient_attention_forward_scratch(query, key, value, *rest) -> int:
    """Bytes ``aten._scaled_dot_product_efficient_attention`` allocates on CUDA inside the call besides
    its outputs: an FP32 output accumulator [B, M, H, Dv] where the kernel cannot keep it in registers
    (16-bit with Dv > 128: ``kNeedsOutputAccumulatorBuffer``, ``mem_eff_attention/kernel_forward.h``)."""
    import torch
    B, H, M, _ = query.shape
    Dv = value.shape[3]
    return block_bytes(4 * B * M * H * Dv) if query.dtype != torch.float32 and Dv > 128 else 0


def cuda_scratch(func, args) -> int:
    """Bytes an ATen call allocates on CUDA inside itself that its meta kernel does not (0 for most)."""
    import torch
    aten = torch.ops.aten
    if func is aten._scaled_dot_product_efficient_attention_backward.default:
        return efficient_attention_backward_scratch(*args)
    if func is aten._scaled_dot_product_efficient_attention.default:
        return efficient_attention_forward_scratch(*args)
    return 0
