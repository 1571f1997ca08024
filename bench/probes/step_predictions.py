"""What `nova-config explain train MODEL --target h200 [--autocast bf16 [--padded] [--clip-grad-norm 1.0]]` predicts for the
built-in and Hugging Face steps (host, meta device): the step time, the launches, the planned peak and
the predicted time of each kernel kind.  One line a step; run it at two commits to see what a change
moved (the lab notebook's prediction tables come from here).

    python3 bench/probes/step_predictions.py [model ...]
"""
import json
import subprocess
import sys

STEPS = [("gpt42m",), ("llama42m",), ("hf-gpt2-42m",), ("hf-llama-42m",), ("gpt144m",),
         ("hf-gpt2-42m", "--autocast", "bf16", "--padded"),
         ("hf-gpt2-42m", "--autocast", "bf16", "--padded", "--clip-grad-norm", "1.0"),
         ("gpt42m", "--autocast", "bf16"), ("llama42m", "--autocast", "bf16"), ("hf-llama-42m", "--autocast", "bf16"),
         ("gpt144m", "--autocast", "bf16")]


def main(argv) -> None:
    steps = [s for s in STEPS if not argv or s[0] in argv]
    for step in steps:
        cmd = ["nova-config", "explain", "train", *step, "--target", "h200", "--json"]
        report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        p = report["prediction"]
        kinds = {k: f"{v['count']} in {v['predicted_us'] / 1000:.3f} ms" for k, v in sorted(p["by_kind"].items())}
        print(f"{' '.join(step)}: {p['step_ms']:.2f} ms, {p['launches']} launches, planned peak "
              f"{report['memory']['peak_bytes'] / 2**30:.2f} GiB; {kinds}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
