"""The notebooks run top to bottom headless and are committed without outputs:
``explore_schedules.ipynb`` (schedules, sweeps, measurements) and ``integrations.ipynb`` (the
torch.compile backend, precompiling a step and its offline misses, Triton, MLIR)."""
import time
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
EXPLORE = NOTEBOOKS / "explore_schedules.ipynb"
INTEGRATIONS = NOTEBOOKS / "integrations.ipynb"


@pytest.mark.parametrize("path", [EXPLORE, INTEGRATIONS], ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def run(path):
    """Execute ``path``; returns (the executed notebook, seconds); an error in any cell fails."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    elapsed = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    return nb, elapsed


def text_of(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_notebook_runs_headless():
    nb, elapsed = run(EXPLORE)
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {}))
    assert images >= 3                      # sweeps, 3060 vs H200, measurements
    assert elapsed < 60, f"notebook took {elapsed:.1f} s"


def test_integrations_notebook_runs_each_integration():
    """Every integration's cell ran and printed what it shows: the backend's graphs on Nova and its
    losses against eager, the precompiled step's kernel counts, the misses built, Nova's Triton
    configuration, the bufferized export and the tiled matmul."""
    pytest.importorskip("mlir.ir")
    nb, elapsed = run(INTEGRATIONS)
    text = text_of(nb)
    for shown in ("runs on the reference interpreter", "step 2: loss", "'failed': 0", "kernels missing", "'compiled': ", "BLOCK_M", "nearest of my four",
                  "bufferized:", "scf.for"):
        assert shown in text, shown
    assert elapsed < 90, f"notebook took {elapsed:.1f} s"
