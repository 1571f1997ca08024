"""The code and the documentation speak in the present tense to users: no work sessions, device
calls or issue numbers in ``nova/``, ``tests/``, ``docs/``, ``bench/``, the README or any file name there.
Results folders are named by the date they were recorded on (``bench/results/h200-2026-12-01/d/``) and
may be cited as paths; the raw result files inside keep what they printed then, so ``bench/results/``
is not checked, and neither is ``bench/NOTES.md``, the project's dated log."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"\b(sessions?|issues?|calls?) \d", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".txt", ".sh", ".ipynb", ".cfg", ".yaml", ".yml"}


def _files():
    yield REPO / "README.md"
    for top in ("nova", "tests", "docs", "bench"):
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO).parts
            if rel[0] == "bench" and (rel[1:] == ("NOTES.md",) or rel[1] == "results"):
                continue
            yield path


def test_no_project_history_in_code_docs_or_file_names():
    hits = []
    for path in _files():
        rel = path.relative_to(REPO)
        if re.search(r"(session|issue|call)_?\d", path.name, re.IGNORECASE):
            hits.append(f"{rel}: the file name")
        if path.suffix not in TEXT_SUFFIXES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{rel}:{number}: {line.strip()[:120]}")
    assert not hits, "project history (say what is, cite results by their folder):\n" + "\n".join(hits)


def test_the_pattern_finds_what_it_is_for():
    space = " "                     # the examples are spelt so that this file passes the check above
    for text in (f"measured in session{space}9", f"Session{space}14, call{space}1: ...", f"(issue{space}12)",
                 f"calls{space}2-4", f"Issue{space}4:"):
        assert HISTORY.search(text), text
    for text in ("bench/results/h200-2026-12-01/d/call4-ncu", "h200-2026-12-01/gemm-v3", "one call per launch", "recall 5x"):
        assert not HISTORY.search(text), text
