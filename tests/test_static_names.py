"""Every name Nova's modules use is defined: pyflakes' undefined-name check over nova/.

GPU-only code paths (kernel launchers, the executor's CUDA branch) never run in CI, so a name lost
in a refactoring there would first fail on the device (it did once: the attention launcher's
``_stream``).  This static check catches it on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest


def test_no_undefined_names_in_nova():
    api = pytest.importorskip("pyflakes.api")
    from pyflakes import messages, reporter as pyflakes_reporter

    class Collect(pyflakes_reporter.Reporter):
        def __init__(self):
            self.found = []

        def flake(self, message):
            if isinstance(message, (messages.UndefinedName, messages.UndefinedExport, messages.UndefinedLocal)):
                self.found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")

        def unexpectedError(self, filename, msg):
            self.found.append(f"{filename}: {msg}")

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.found.append(f"{filename}:{lineno}: {msg}")

    root = Path(__file__).resolve().parents[1] / "nova"
    collect = Collect()
    for path in sorted(root.rglob("*.py")):
        api.checkPath(str(path), collect)
    assert not collect.found, "\n".join(collect.found)
