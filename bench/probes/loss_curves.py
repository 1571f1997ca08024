"""Per-step loss curves of `nova.bench.train` results against a reference curve: how many steps lie
more than ``--threshold`` (relative) from it, the first of them, and the largest distance.

    python3 bench/probes/loss_curves.py REFERENCE.json CURVE.json [CURVE.json ...] [--threshold 0.005]
    python3 bench/probes/loss_curves.py REFERENCE.json CURVE.json ... --also REFERENCE2.json [...]

Each file is a `nova.bench.train` result (its ``losses``); the curves are compared step by step over
the steps both have.  With ``--also`` (more runs of the reference framework) each curve is compared with
the references' envelope instead: at each step the band from the lowest to the highest reference loss,
widened by the threshold; a step counts when the curve leaves it (where one run of the reference
disagrees with another by more than the threshold, one curve against one curve decides nothing).
"""
import argparse
import json


def compare(curve: list, reference: list, threshold: float) -> dict:
    distance = [abs(x - y) / abs(y) for x, y in zip(curve, reference)]
    over = [i for i, d in enumerate(distance) if d > threshold]
    return {"steps": len(distance), "over": len(over), "first": over[0] if over else None,
            "largest": max(distance) if distance else 0.0}


def outside_envelope(curve: list, references: list[list], threshold: float) -> dict:
    """Steps where ``curve`` lies outside [min, max] of ``references`` widened by ``threshold``
    (relative), and the largest relative distance outside it."""
    over, largest = [], 0.0
    for i, x in enumerate(curve[:min(len(r) for r in references)]):
        low, high = min(r[i] for r in references), max(r[i] for r in references)
        distance = max((low - x) / abs(low), (x - high) / abs(high), 0.0)
        if distance > threshold:
            over.append(i)
        largest = max(largest, distance)
    return {"steps": min(len(curve), *(len(r) for r in references)), "over": len(over),
            "first": over[0] if over else None, "largest": largest}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("curves", nargs="+")
    ap.add_argument("--threshold", type=float, default=0.005)
    ap.add_argument("--also", nargs="+", default=[], metavar="REFERENCE",
                    help="more runs of the reference: compare with their envelope")
    args = ap.parse_args()
    losses = lambda path: json.load(open(path))["losses"]  # noqa: E731
    reference = losses(args.reference)
    if args.also:
        references = [reference] + [losses(p) for p in args.also]
        spread = max(compare(r, reference, 0.0)["largest"] for r in references[1:])
        print(f"against the envelope of {len(references)} reference runs (they differ by up to {spread:.2%}; "
              f"steps more than {args.threshold:.2%} outside it):")
        for path in args.curves:
            c = outside_envelope(losses(path), references, args.threshold)
            print(f"  {path}: {c['over']} of {c['steps']} steps outside (first {c['first']}), "
                  f"largest {c['largest']:.2%}")
        return
    print(f"against {args.reference} (steps more than {args.threshold:.2%} from it):")
    for path in args.curves:
        c = compare(losses(path), reference, args.threshold)
        print(f"  {path}: {c['over']} of {c['steps']} steps over (first {c['first']}), largest {c['largest']:.2%}")


if __name__ == "__main__":
    main()
