"""A training run with the loss pair kept apart: the fusion pass's rule that joins a
``cross_entropy_backward`` to its forward's group switched off, so each loss chunk runs the two rows
kernels (``cross_entropy``, ``cross_entropy_backward``) the fused kernel replaces.  With
``NOVA_DETERMINISTIC=1`` on both sides, a curve of this and one of the default plan are equal bit for
bit unless the fused kernel computes something else on the hardware.

    NOVA_PLAN_CACHE=0 python3 bench/probes/loss_pair_ab.py precompile train llama42m --target h200
    NOVA_PLAN_CACHE=0 python3 bench/probes/loss_pair_ab.py train --framework nova --model llama42m ...

The first form is ``nova precompile ...`` and the second ``python3 -m nova.bench.train ...``, each with
the rule off (the plan cache off too, so no fused plan is read back).
"""
import sys

from nova.passes import fusion


def keep_loss_pair_apart() -> None:
    fusion._Fuser._loss_forward = lambda self, node: None


if __name__ == "__main__":
    keep_loss_pair_apart()
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "precompile":
        from nova.cli.main import main
        sys.exit(main(["precompile", *rest]))
    if mode == "train":
        from nova.bench.train import main
        sys.exit(main(rest))
    sys.exit(f"loss_pair_ab.py: the mode is precompile or train, not {mode!r}")
