"""Per-step loss curves of `nova.bench.train` results against a reference curve: how many steps lie
more than ``--threshold`` (relative) from it, the first of them, and the largest distance.

    python3 bench/probes/loss_curves.py REFERENCE.json CURVE.json [CURVE.json ...] [--threshold 0.005]

Each file is a `nova.bench.train` result (its ``losses``); the curves are compared step by step over
the steps both have.
"""
import argparse
import json


def compare(curve: list, reference: list, threshold: float) -> dict:
    distance = [abs(x - y) / abs(y) for x, y in zip(curve, reference)]
    over = [i for i, d in enumerate(distance) if d > threshold]
    return {"steps": len(distance), "over": len(over), "first": over[0] if over else None,
            "largest": max(distance) if distance else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("curves", nargs="+")
    ap.add_argument("--threshold", type=float, default=0.005)
    args = ap.parse_args()
    reference = json.load(open(args.reference))["losses"]
    print(f"against {args.reference} (steps more than {args.threshold:.2%} from it):")
    for path in args.curves:
        c = compare(json.load(open(path))["losses"], reference, args.threshold)
        print(f"  {path}: {c['over']} of {c['steps']} steps over (first {c['first']}), largest {c['largest']:.2%}")


if __name__ == "__main__":
    main()
