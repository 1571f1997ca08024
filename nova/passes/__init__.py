"""Graph passes: graph -> graph transformations and analyses, one module each.

    dce.py            dead-code elimination (outputs are the roots)
    cse.py            common-subexpression elimination (constants by value, dtype, shape)
    canonicalize.py   views folded, identity views dropped, transposes absorbed into matmul layouts,
                      trivial constants folded
    cross_entropy.py  log_softmax -> nll_loss (+ their backward) -> cross_entropy (+ backward) composites
    layout.py         analysis: each value as a strided view of a root's storage (or a copy)
    fusion.py         nodes -> kernel groups (GEMM epilogues, pointwise regions, reductions); which run
                      on Nova kernels (GEMM, rows.py, pointwise_from_ir.py, optimizer updates)
    rows.py, rows_from_ir.py            the groups on Nova rows kernels and their problem statements
    pointwise_from_ir.py                a fused pointwise group's PointwiseProblem (and an expression's,
                                        parsed by pointwise_expression.py)
    schedule.py       the order the groups run in (memory-greedy, never worse than program order)
    memory.py         the memory plan: arena offsets, aliases, donation, in-place reuse, validation
    pipeline.py       pipeline(graph, target, kernels) -> Planned; format_plan
    memory_policy.py  without a budget: the chunked loss and rematerializations priced at (near) nothing
    budget.py         under a memory budget (chunked_loss.py, remat.py, peak.py): fit or refuse in one line
    examples.py       hand-built training-step graphs (tests, demonstrations)
    rewrite.py        the Rewriter the rewriting passes share
"""
from nova.passes.canonicalize import canonicalize
from nova.passes.cross_entropy import fuse_cross_entropy
from nova.passes.cse import cse
from nova.passes.dce import dce
from nova.passes.fusion import Epilogue, Group, fuse
from nova.passes.memory import MemoryPlan, ValuePlan, View, plan_memory, validate_memory_plan
from nova.passes.pipeline import Planned, format_plan, pipeline
from nova.passes.schedule import schedule

__all__ = ["dce", "cse", "canonicalize", "fuse_cross_entropy", "fuse", "schedule", "plan_memory",
           "validate_memory_plan", "pipeline", "format_plan", "Planned", "Group", "Epilogue", "MemoryPlan",
           "ValuePlan", "View"]
