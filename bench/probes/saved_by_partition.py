"""What the forward of a training step saves for the backward under AOTAutograd's partitions (host,
CPU): Nova's decompositions with the default partition (what the torch.compile backend uses) and with
the min-cut, and Inductor's decompositions with the min-cut; each forward graph's outputs, the largest
listed (views of one storage are listed apart: the backend's hand-over reads them as one input).

    python3 bench/probes/saved_by_partition.py [--model gpt42m] [--batch 4] [--seq 256]
"""
import argparse
import functools

import torch
from functorch.compile import default_partition, min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.decomposition import select_decomp_table

from nova import models
from nova.integrations import dynamo


def saved(label):
    def compiler(gm, example, part):
        if part == "forward":
            items = []
            for o in [n for n in gm.graph.nodes if n.op == "output"][0].args[0]:
                v = getattr(o, "meta", {}).get("val") if isinstance(o, torch.fx.Node) else None
                if isinstance(v, torch.Tensor):
                    items.append((v.numel() * v.element_size(), o.name, tuple(v.shape)))
            items.sort(reverse=True)
            print(f"{label}: {len(items)} tensors, {sum(b for b, _, _ in items) / 1e6:.1f} MB")
            for nbytes, name, shape in items[:8]:
                print(f"   {nbytes / 1e6:7.1f} MB {name} {shape}")
        return gm
    return compiler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt42m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    model = models.build(args.model, seed=0)
    idx = torch.randint(0, models.config(args.model).vocab_size, (args.batch, args.seq))
    for label, decompositions, partition in [("nova, default partition", dynamo.decompositions(), default_partition),
                                             ("nova, min-cut", dynamo.decompositions(), min_cut_rematerialization_partition),
                                             ("inductor's decompositions, min-cut", select_decomp_table(),
                                              min_cut_rematerialization_partition)]:
        torch._dynamo.reset()
        c = saved(label)
        backend = aot_autograd(fw_compiler=functools.partial(c, part="forward"),
                               bw_compiler=functools.partial(c, part="backward"),
                               decompositions=decompositions, partition_fn=partition)
        torch.compile(model, backend=backend)(idx, idx).backward()


if __name__ == "__main__":
    main()
