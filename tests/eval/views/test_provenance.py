"""Cells from different invocations are never mixed without a word (issue 34): the report and the notebook
loader say so, and the loader shows where each cell ran."""
import pytest
from dkilab.eval.harness.experiment import ExperimentConfig
from dkilab.eval.harness.runner import run_experiment


def cfg(*labels):
    return ExperimentConfig.model_validate({
        "name": "prov", "tracing": False, "datasets": [{"name": "fixtures", "question_limit": 2}],
        "strategies": [{"name": "recall_only", "label": label} for label in labels]})


def test_a_comparison_across_invocations_is_flagged(tmp_path):
    from dkilab.eval.views.report import report
    from dkilab.notebook import load_runs

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run_experiment(cfg("a"), uri=uri, progress=False, echo=lambda *a: None)
    table, _, notes = report("prov", uri, pairs=False)
    assert not [n for n in notes if "invocations" in n]  # one invocation: nothing to say
    run_experiment(cfg("a", "b"), uri=uri, progress=False, echo=lambda *a: None)  # a read back, b new
    table, _, notes = report("prov", uri, pairs=False)
    (note,) = [n for n in notes if "invocations" in n]
    assert note.startswith("note: these cells come from 2 invocations") and "latency" in note
    with pytest.warns(UserWarning, match="2 invocations"):
        runs = load_runs("prov", uri)
    assert runs["invocation"].nunique() == 2 and runs["host"].notna().all()
