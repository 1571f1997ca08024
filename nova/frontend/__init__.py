"""Nova's frontend: capture of a whole PyTorch step on fake tensors and its lowering to the IR.

    captured = capture(train_step, (idx, targets))      # graph + bindings + guards
    captured.graph                                       # nova.ir.Graph (forward, backward, optimizer)

    discover.py   the modules and optimizers a function uses
    capture.py    make_fx + dispatch functionalization of the step; inputs, outputs, pruning
    optim.py      recognised optimizers: Nova's own update (nova::adamw / nova::sgd), state layout
    origin.py     module path + source line of every traced op
    lower.py      ATen FX graph -> nova.ir.Graph (one table of small lowerings)
    bindings.py   graph inputs/outputs <-> the user's parameters, grads, optimizer state, results
    guards.py     what must stay true to reuse a captured graph
    tracing.py    libraries asking torch.compiler.is_compiling() hear yes while Nova traces
    failures.py   a tracing limitation (one Nova line) vs the user's own error (passed through)
    checks.py     value checks (clip_grad_norm_'s error_if_nonfinite) kept in the graph
    autocast.py   torch.autocast of the step's device applied to the CPU fakes
"""
from nova.frontend.errors import NovaUnsupportedError
from nova.frontend.capture import Captured, CaptureStats, capture
from nova.frontend.bindings import Bindings, InputBinding, OutputBinding
from nova.frontend.discover import Discovered, discover
from nova.frontend.guards import GuardKey, guard_key
from nova.frontend.lower import LOWERINGS, Lowered, lower

__all__ = ["capture", "Captured", "CaptureStats", "Bindings", "InputBinding", "OutputBinding", "Discovered",
           "discover", "GuardKey", "guard_key", "lower", "Lowered", "LOWERINGS", "NovaUnsupportedError"]
