"""Every notebook in notebooks/ runs top to bottom, twice against one temporary MLflow store (the second
run reads the finished cells back), and is committed without outputs."""
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    for attempt in ("first run", "second run, cells read back"):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"], attempt
        text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/html", "")) for o in outputs)
        assert "recall_v4@fixtures" in text and "score" in text, attempt  # the comparison table was shown
        assert any("image/png" in o.get("data", {}) for o in outputs), attempt  # and the plot


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code"), path
