"""Nova's compiler: ``nova.compile`` drives frontend -> passes -> program and replays steps.

    step.py        nova.compile, CompiledStep (guards, step cache, engines, write-back)
    executor.py    the planned graph's program: one launch per kernel group over one arena, Nova GEMMs
                   and attention, ATen out-variants for the rest, CUDA-graph replay on the GPU
                   (plan_view.py reads the planner's result, aten_kernels.py and gemm_lowering.py
                   build the launches)
    explain.py     the whole-program explain;  cost.py  the times of ATen-fallback kernels
                   (aten_launches.py: the CUDA kernels behind an ATen call, counted on meta)
    precompile.py  every kernel of a planned step into the kernel cache

Importing the package is cheap: ``compile`` and ``CompiledStep`` load torch on first access.
"""
__all__ = ["compile", "CompiledStep", "ReferenceEngine", "StepStats"]


def __getattr__(name: str):
    if name in __all__:
        from nova.compiler import step
        return getattr(step, name)
    raise AttributeError(f"module 'nova.compiler' has no attribute {name!r}")
