"""The README's quickstart table is what the quickstart gives: experiments/quickstart.yaml run here (the five
strategies and full_attention as the seed writes it, the offline SmolLM2, 28 questions), then every `$ dkilab
report` block of README.md compared with what its command prints from that run (scripts/readme_figures.py;
`make readme-figures` rewrites them). The same run is re-scored without a model to the same metrics."""
import os
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _quickstart(tmp_path):
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.notes import check_expectations
    from dkilab.eval.harness.runner import run_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        cfg = load_experiment(ROOT / "experiments" / "quickstart.yaml")
        results = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    finally:
        os.chdir(cwd)
    assert check_expectations(cfg, results) == []
    return cfg, results, uri


def _figures():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import readme_figures
    finally:
        sys.path.pop(0)
    return readme_figures


def test_the_readme_quickstart_table_is_what_the_quickstart_gives(tmp_path):
    """One test, one run: under xdist a module fixture runs once per worker (twice here, 10 minutes each)."""
    from tests.eval.harness.test_runner import _rescored_alike

    cfg, results, uri = _quickstart(tmp_path)
    figures = _figures()
    blocks = figures.BLOCK.findall(figures.README.read_text(encoding="utf-8"))
    assert any(cmd.startswith("$ dkilab report quickstart") for cmd, _ in blocks)  # the check reads something
    stale = figures.stale_blocks(uri)
    assert not stale, "README.md is stale (make readme-figures rewrites it):\n" + "\n".join(
        f"{cmd}\nREADME:\n{was}\nnow:\n{now}" for cmd, was, now in stale)
    # and the check can fail: one figure changed in the README's text is caught
    text = figures.README.read_text(encoding="utf-8")
    cell = results[0].cell.label
    line = next(ln for ln in text.splitlines() if ln.startswith(cell))
    assert figures.stale_blocks(uri, text.replace(line, line.replace("0", "9", 1)))
    # every cell fills the one budget, and the run re-scores without a model to the same metrics
    assert len(results) == 6 and all(r.metrics["errors"] == 0 and r.metrics["questions"] == 28 for r in results)
    assert all(r.metrics["history_budget"] == 640 for r in results if r.cell.strategy.key != "no_memory")
    _rescored_alike(cfg.name, uri, cells=6)
