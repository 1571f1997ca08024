"""The documentation says what the commands take and print: ``docs/cli.md`` is the rendering of
the commands' parsers and lists every flag (``explain attention``, ``explain train`` and ``bench
train`` included), ``docs/configuration.md`` every ``NOVA_*`` variable the package reads, the
README's main command prints what the README shows and the step time it quotes, the README's
commands parse, its links resolve, and ``.ci/run`` runs exactly the README's test command."""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
CLI_DOC = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")


def test_cli_reference_is_the_rendering_of_the_parsers():
    from nova.cli.docs import render
    assert CLI_DOC == render(), "regenerate: python3 -m nova.cli.docs > docs/cli.md"


def _options(parser: argparse.ArgumentParser, where: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{where} {name}")
        if action.help != argparse.SUPPRESS:
            for opt in action.option_strings:
                yield where.strip(), opt


def _all_parsers():
    from nova.bench import train as bench_train
    from nova.cli import config, main, train
    from nova.kernels.attention import cli as attention_cli
    return {"nova": main.build_parser(), "nova-config": config.build_parser(),
            "nova-config explain attention": attention_cli.build_parser(),
            "nova-config explain train": train.explain_parser(),
            "nova bench train": bench_train.parser("nova bench train")}


@pytest.mark.parametrize("command", ["nova", "nova-config", "nova-config explain attention",
                                     "nova-config explain train", "nova bench train"])
def test_every_flag_is_documented(command):
    """Independently of the renderer: every option string of every parser (subcommands expanded)
    appears in a table row of docs/cli.md, under the heading of its command."""
    parser = _all_parsers()[command]
    sections = re.split(r"^### ", CLI_DOC, flags=re.M)
    missing = []
    for where, opt in _options(parser):
        heading = f"`{command} {where}".strip()
        if not any(s.startswith(heading) and re.search(rf"^\| [^|]*`{re.escape(opt)}`", s, re.M) for s in sections):
            missing.append(f"{command} {where}: {opt}")
    assert not missing, f"docs/cli.md does not document {sorted(missing)}"


def test_every_environment_variable_is_documented():
    names = set()
    for path in (REPO / "nova").rglob("*.py"):
        names |= set(re.findall(r"""["'](NOVA_[A-Z_]+)["']""", path.read_text(encoding="utf-8")))
    assert names >= {"NOVA_CACHE_DIR", "NOVA_OFFLINE", "NOVA_TARGET", "NOVA_HOPPER", "NOVA_DEBUG"}
    configuration = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert not [n for n in sorted(names) if f"`{n}`" not in configuration]


def _bash_after(marker: str) -> str:
    """The first ```bash block after ``marker``."""
    start = README.index("```bash\n", README.index(marker)) + len("```bash\n")
    return README[start:README.index("```", start)].strip()


def test_ci_runs_the_readme_test_command():
    test_cmd = _bash_after("Install and run the test suite")
    ci = [l for l in (REPO / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith(("#", "set ", "cd "))]
    assert ci == [test_cmd]


def test_what_you_get_shows_the_main_command_and_its_output():
    main_cmd = _bash_after("Install and run the main job")
    sample = README[README.index("## What you get"):]
    sample = sample[sample.index("```text\n") + 8:]
    sample = sample[:sample.index("```")]
    command, first = sample.splitlines()[:2]
    shown = command.removeprefix("$ ")
    assert main_cmd.endswith(shown)
    r = subprocess.run([sys.executable, "-m", "nova.cli.config", *shown.split()[1:]], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == first


def test_readme_commands_parse():
    """Every ``nova``/``nova-config`` command line in the README's bash blocks is accepted by its parser."""
    from nova.cli import config, main
    from nova.cli.train import explain_parser
    from nova.kernels.attention import cli as attention_cli
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    lines = [part.strip() for block in blocks for line in block.splitlines() for part in line.split("&&")]
    commands = [shlex.split(l) for l in lines if l.startswith(("nova ", "nova-config "))]
    assert len(commands) >= 4
    from nova.cli import optimizer as optimizer_cli
    from nova.cli import pointwise as pointwise_cli
    from nova.kernels.rows import cli as rows_cli
    for argv in commands:
        if argv[:3] == ["nova-config", "explain", "attention"]:
            attention_cli.build_parser().parse_args(argv[3:])
        elif argv[:3] == ["nova-config", "explain", "train"]:
            explain_parser().parse_args(argv[3:])
        elif argv[:2] == ["nova-config", "explain"] and argv[2] in config.ROWS_OPS:
            rows_cli.build_parser(argv[2]).parse_args(argv[3:])
        elif argv[:3] == ["nova-config", "explain", "pointwise"]:
            pointwise_cli.build_parser().parse_args(argv[3:])
        elif argv[:2] == ["nova-config", "explain"] and argv[2] in ("adamw", "sgd"):
            optimizer_cli.build_parser(argv[2]).parse_args(argv[3:])
        else:
            (config if argv[0] == "nova-config" else main).build_parser().parse_args(argv[1:])


def test_readme_and_docs_links_resolve():
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_readme_step_time_is_what_explain_train_prints():
    """The README quotes the predicted GPT-42M step time: it must be what the command it names
    prints today (a change to the planner or the cost models changes it: update the README)."""
    pytest.importorskip("torch")
    from nova.compiler.explain import explain_train
    m = re.search(r"`nova-config explain train gpt42m --batch 32 --target h200`[^*]*\*\*([0-9.]+) ms\*\*", README, re.S)
    assert m, "the README quotes the predicted step time of nova-config explain train gpt42m --batch 32 --target h200"
    report = explain_train("gpt42m", 32, None, "h200", "adamw")
    assert float(m.group(1)) == round(report["prediction"]["step_ms"], 1)
