"""Nova's compiler: ``nova.compile`` drives frontend -> passes -> program and replays steps.

    step.py       nova.compile, CompiledStep (guards, step cache, engines, write-back)
    executor.py   the planned graph's program (launch list over one arena) [compiler part of issue 13]
"""
from nova.compiler.step import CompiledStep, ReferenceEngine, StepStats, compile

__all__ = ["compile", "CompiledStep", "ReferenceEngine", "StepStats"]
