"""Nova plugged into other compilers and tools (docs/integrations.md).

    dynamo.py        ``torch.compile(model, backend="nova")``: AOTAutograd's forward and backward
                     graphs lowered to Nova's IR and run by the interpreter (CPU) or the executor
                     (CUDA); what Nova cannot take runs as torch would, named in the ``nova`` log
    user_step.py     a user's own training step, captured on the meta device and precompiled
                     (``nova precompile train --step pkg.module:factory``, ``nova.precompile``)
    triton.py        Nova's GEMM schedule as a Triton matmul configuration (``autotune_configs``,
                     ``prune``); ``nova-config export triton``
    mlir_export.py   a captured graph as MLIR on tensors (``func``/``linalg``/``tensor``/``arith``/``math``)
    transform_script.py  a GEMM schedule as a transform-dialect script for ``linalg.matmul``
    cli.py           ``nova-config export triton|transform``

Importing this package imports nothing heavy; each module loads torch (or MLIR) itself.
"""
