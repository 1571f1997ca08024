"""Nova's graph IR: value-semantic graphs of a small closed set of typed ops.

    types.py        TensorType (shape + element type), broadcasting, promotion
    graph.py        Value, Node, Graph (inputs with roles, outputs that may update an input)
    ops.py          every op: kind, type rule, reference semantics
    printer.py      the text form;  verify.py  the verifier;  hashing.py  the structural hash
    interpreter.py  runs a graph on torch CPU tensors (reference mode, and the tests' oracle)
"""
from nova.ir.graph import INPUT_ROLES, OUTPUT_ROLES, Graph, Input, Node, Output, Value
from nova.ir.hashing import structural_hash
from nova.ir.ops import OPS, OpDef, infer, kind, opdef
from nova.ir.printer import format_graph
from nova.ir.types import IRError, TensorType
from nova.ir.verify import verify

__all__ = ["Graph", "Input", "Output", "Node", "Value", "TensorType", "IRError", "INPUT_ROLES", "OUTPUT_ROLES",
           "OPS", "OpDef", "infer", "kind", "opdef", "format_graph", "structural_hash", "verify"]
