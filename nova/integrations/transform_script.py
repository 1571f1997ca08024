"""A GEMM schedule as a transform-dialect script applicable to ``linalg.matmul``.

    nova-config export transform matmul 4096x4096x4096 --dtype bf16 --target h200 [--with-payload]
    mlir-opt --transform-interpreter payload_and_script.mlir

``transform_script(M, N, K, dtype, target)`` derives Nova's schedule (``nova.configurator.configure``)
and writes the tiling it implies as one ``transform.named_sequence @__transform_main``:

1. the block tile: ``transform.structured.tile_using_forall`` with ``[block_m, block_n]``, the
   forall mapped to ``#gpu.block<y>, #gpu.block<x>`` (one CTA per C tile);
2. the K loop: ``transform.structured.tile_using_for`` with ``[0, 0, block_k]`` (one shared-memory
   stage per iteration);
3. the compute warps' tiles inside the block tile: ``tile_using_forall`` mapped to
   ``#gpu.warp<y>, #gpu.warp<x>`` with the warp tile ``[warp_tile_m, warp_tile_n]`` (mma.sync), or to
   ``#gpu.warpgroup<x>`` with one consumer warpgroup's share of the tile (wgmma, cooperative
   consumers: ``block_m / consumer_warpgroups`` rows, or ``block_n / consumer_warpgroups`` columns
   when Nova swaps the operands and the wgmma rows run along N); ping-pong consumers each compute
   the whole block tile, so no warp-level tiling is emitted.

Decisions with no upstream transform op (or none that applies to tensors before bufferization)
are stated as comments in the script: the pipeline depth (``stages``), the group-M rasterization,
split-K or stream-K, the thread-block cluster and the MMA instruction.  ``payload`` writes a
``func.func`` with the ``linalg.matmul`` the script applies to (A [M, K], B [K, N], FP32
accumulator), ``with_payload`` both in one module for ``--transform-interpreter``.
"""
from __future__ import annotations

PAYLOAD_TYPES = {"tf32": ("f32", "f32"), "bf16": ("bf16", "f32"), "fp16": ("f16", "f32")}


def _ops(n: int) -> str:
    return ", ".join(["!transform.any_op"] * n)


def transform_script(M: int, N: int, K: int, dtype: str = "tf32", target="h200", *, trans_a: bool = False,
                     trans_b: bool = False) -> str:
    """The transform-dialect module (``transform.with_named_sequence``) of Nova's schedule."""
    from nova.configurator import GemmProblem, configure
    from nova.hwmodel import get_target
    gpu = get_target(target) if isinstance(target, str) else target
    problem = GemmProblem(M, N, K, dtype=dtype, trans_a=trans_a, trans_b=trans_b)
    s = configure(problem, gpu, kernel="tiles").schedule      # a tiling of the tensor-core schedule
    swap = bool(getattr(s, "swap_ab", False))
    lines = [f"// Nova's schedule of {problem.describe()} on {gpu.name} ({s.mma}) as transform-dialect tiling",
             f"// pipeline depth: {s.stages} shared-memory stages (a software-pipelining pass after bufferization, "
             f"e.g. transform.nvgpu.pipeline_shared_memory_copies)",
             f"// rasterization: group-M {s.group_m} (tile rows per L2 group; no transform op)"]
    if s.split_k > 1:
        lines.append(f"// split-K {s.split_k} ({s.split_reduction} reduction): not applied here")
    if s.stream_k_tiles:
        lines.append(f"// stream-K over the last {s.stream_k_tiles} tiles: not applied here")
    if s.cluster_m * s.cluster_n > 1:
        lines.append(f"// thread-block cluster {s.cluster_m}x{s.cluster_n} (TMA multicast): not applied here")
    if swap:
        lines.append("// Nova swaps the operands (C^T = B^T A^T: the wgmma rows run along N)")
    body = ['%matmul = transform.structured.match ops{["linalg.matmul"]} in %root : (!transform.any_op) -> '
            '!transform.any_op',
            f"// block tile {s.block_m} x {s.block_n}: one CTA per C tile",
            f"%block, %grid = transform.structured.tile_using_forall %matmul tile_sizes [{s.block_m}, {s.block_n}] "
            f"(mapping = [#gpu.block<y>, #gpu.block<x>]) : (!transform.any_op) -> ({_ops(2)})",
            f"// K loop: {s.block_k} per shared-memory stage",
            f"%kstep, %kloop = transform.structured.tile_using_for %block tile_sizes [0, 0, {s.block_k}] : "
            f"(!transform.any_op) -> ({_ops(2)})"]
    if s.mma.family == "wgmma":
        wgs = s.consumer_warpgroups
        if s.pingpong:
            body.append(f"// ping-pong: each of {wgs} consumer warpgroups computes whole block tiles (no warp tiling)")
        elif wgs > 1:
            tile = (s.block_m, s.block_n // wgs) if swap else (s.block_m // wgs, s.block_n)
            sizes = (0, tile[1]) if swap else (tile[0], 0)       # 0: the dimension the warpgroups do not split
            body += [f"// {wgs} consumer warpgroups, each {tile[0]} x {tile[1]} of the block tile "
                     f"(wgmma m{s.mma.m}n{s.mma.n}k{s.mma.k})",
                     f"%group, %groups = transform.structured.tile_using_forall %kstep tile_sizes [{sizes[0]}, {sizes[1]}] "
                     f"(mapping = [#gpu.warpgroup<x>]) : (!transform.any_op) -> ({_ops(2)})"]
        else:
            body.append(f"// one consumer warpgroup computes the block tile (wgmma m{s.mma.m}n{s.mma.n}k{s.mma.k})")
    else:
        body += [f"// {s.warps_m} x {s.warps_n} warps, each {s.warp_tile_m} x {s.warp_tile_n} "
                 f"(mma m{s.mma.m}n{s.mma.n}k{s.mma.k})",
                 f"%warp, %warps = transform.structured.tile_using_forall %kstep tile_sizes [{s.warp_tile_m}, "
                 f"{s.warp_tile_n}] (mapping = [#gpu.warp<y>, #gpu.warp<x>]) : (!transform.any_op) -> ({_ops(2)})"]
    body.append("transform.yield")
    lines += ["module attributes {transform.with_named_sequence} {",
              "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {",
              *["    " + line for line in body], "  }", "}"]
    return "\n".join(lines) + "\n"


def payload(M: int, N: int, K: int, dtype: str = "tf32", name: str = "matmul") -> str:
    """A ``func.func`` computing ``C[M, N] += A[M, K] @ B[K, N]`` with ``linalg.matmul`` (FP32 C)."""
    if dtype not in PAYLOAD_TYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; choose one of {', '.join(PAYLOAD_TYPES)}")
    a, c = PAYLOAD_TYPES[dtype]
    ta, tb, tc = f"tensor<{M}x{K}x{a}>", f"tensor<{K}x{N}x{a}>", f"tensor<{M}x{N}x{c}>"
    return (f"func.func @{name}(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = linalg.matmul ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %0 : {tc}\n}}\n")


def with_payload(M: int, N: int, K: int, dtype: str = "tf32", target="h200", **layout) -> str:
    """One module holding the payload and the script (``mlir-opt --transform-interpreter`` input)."""
    script = transform_script(M, N, K, dtype, target, **layout)
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("module attributes"))
    return "\n".join(lines[:start + 1] + ["  " + line for line in payload(M, N, K, dtype).splitlines()]
                     + lines[start + 1:]) + "\n"
