"""docs/integrations.md documents every flag of ``nova-config export`` and ``--step``."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

DOC = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text(encoding="utf-8")


def _flags(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _flags(sub)
        yield from (opt for opt in action.option_strings if opt not in ("-h", "--help"))


def test_every_export_flag_and_step_is_documented():
    from nova.cli.export import build_parser
    flags = set(_flags(build_parser())) | {"--step", "--with-payload", "--json"}
    missing = sorted(f for f in flags if not re.search(rf"`[^`]*{re.escape(f)}(?![\w-])", DOC))
    assert not missing, f"docs/integrations.md does not document {missing}"
    assert "nova-config export triton" in DOC and "nova-config export transform" in DOC
