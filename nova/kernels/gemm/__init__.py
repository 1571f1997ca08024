"""Matrix multiplication (GEMM with fused bias and activation): the problem, the schedule, the two
instruction families' derivations and MLIR builders, compilation.

    problem.py      GemmProblem: shapes, layouts, dtypes, epilogue; validation
    schedule.py     Schedule (+ HopperPlan): every decision codegen and the runtime read
    configure.py    configure(problem, target): picks the family, returns the Config
    ampere.py       the mma.sync derivation (numbered steps), check_schedule
    hopper.py       the wgmma/TMA derivation and its cost model
    cost.py         the mma.sync cost model (predict, roofline floor)
    space.py        the schedule space around the analytic pick (nova tune, the oracle)
    emit_ampere.py  the mma.sync + cp.async MLIR builder
    emit_hopper.py  the wgmma + TMA MLIR builder and the operand-prep kernels
    skinny.py       the skinny kernel's derivation (a few rows: B streamed on the CUDA cores) and
                    choose_kernel, the lower prediction of it and the tiles
    skinny_schedule.py  SkinnySchedule: the skinny kernel's decisions
    eager.py        choose_eager: an eager call's kernel, device time against host time per launch
    emit_skinny.py  the skinny kernel's MLIR builder (K slices added by each column block's last CTA)
    compile.py      build_module / compile_gemm / compile_skinny: MLIR -> PTX -> KernelArtifact

The public spellings stay ``nova.configurator`` (``configure``, ``GemmProblem``, ``Schedule``, ...)
and ``nova.codegen`` (``compile_gemm``, ``build_module``).  Importing this package imports nothing
heavy.
"""
