"""The README documents what the commands take and print: every flag of ``nova`` and
``nova-config``, every ``NOVA_*`` environment variable the package reads, the main command's
output, and ``.ci/run`` runs exactly the README's test command."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _options(parser: argparse.ArgumentParser, where: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{where} {name}")
        for opt in action.option_strings:
            yield where.strip(), opt


@pytest.mark.parametrize("module", ["nova.cli.main", "nova.cli.config"])
def test_every_flag_is_documented(module):
    import importlib
    parser = importlib.import_module(module).build_parser()
    missing = sorted({f"{where}: {opt}" for where, opt in _options(parser)
                      if not re.search(rf"`[^`]*{re.escape(opt)}(?![\w-])", README)})
    assert not missing, f"README does not document {missing}"


def test_every_environment_variable_is_documented():
    names = set()
    for path in (REPO / "nova").rglob("*.py"):
        names |= set(re.findall(r"""["'](NOVA_[A-Z_]+)["']""", path.read_text(encoding="utf-8")))
    assert names >= {"NOVA_CACHE_DIR", "NOVA_OFFLINE", "NOVA_TARGET", "NOVA_HOPPER", "NOVA_DEBUG"}
    assert not [n for n in sorted(names) if f"`{n}" not in README]


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
