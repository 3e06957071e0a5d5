"""Every text strategy driven by scripted personas that behave like real models
(experiments/ci/personas.yaml): the invariants hold on every cell, and each persona's fact-call metrics
match the calls it made."""
import os

import pytest
from dkilab.models.tool_calls import has_call, parse_tool_calls

from tests.conftest import ROOT

CONFIG = ROOT / "experiments" / "ci" / "personas.yaml"
LOOP = {"generic", "deepseek", "glm", "native"}  # the recall_v4 cells with retrieve_fact offered


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('personas') / 'm.db'}"


@pytest.fixture(scope="module")
def cells(uri):
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.notes import check_expectations
    from dkilab.eval.harness.runner import run_experiment

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        cfg = load_experiment(CONFIG)
        results = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    finally:
        os.chdir(cwd)
    assert check_expectations(cfg, results) == []
    return {(r.cell.strategy.key, r.cell.model.spec.rsplit("/", 1)[1].removesuffix(".yaml")): r for r in results}


def _rows(cells, persona, loop=True):
    return [(key, row) for (key, p), r in cells.items() if p == persona and (key in LOOP) == loop for row in r.rows]


def test_every_cell_ran_and_no_call_is_ever_recorded_as_an_answer(cells):
    assert len(cells) == 6 * 12
    for (key, persona), r in cells.items():
        assert len(r.rows) == 4 and r.metrics["errors"] == 0, (key, persona)
        for row in r.rows:  # every strategy, every syntax, calls on or off, cut off or whole
            text = row["prediction"] or ""
            assert "retrieve_fact" not in text and not parse_tool_calls(text) and not has_call(text), (key, persona)
            assert row["final_call"] in (0.0, 1.0)
            if row["final_call"] == 1.0:  # no answer: never a decline, never a hallucination
                assert text == "" and row["abstained"] is False and row.get("hallucinated") is None, (key, persona)
            if key in LOOP:
                assert (row["final_call"] == 1.0) == (text == "" and row["fact_calls"] > 0), (key, persona, row)
    for persona in ("tool_happy", "llama31_calls", "react_calls", "truncating", "native_calls"):
        for key, row in _rows(cells, persona, loop=False):  # stable, and recall_v4 with its calls off
            assert row["final_call"] == 1.0 and row["fact_calls"] == 0, (key, persona, row["prediction"])


def test_budgets_are_kept_on_every_row(cells):
    for (key, persona), r in cells.items():
        for row in r.rows:
            b = row["budget"]
            assert b["total"] == b["history"] == 1024 and b["used"] <= 1024, (key, persona, b)
            assert row["prompt_tokens"] + row["generated_tokens"] <= 4096
            assert row["tokens_processed"] >= row["prompt_tokens"] + row["generated_tokens"]


def test_a_tool_happy_model_spends_its_rounds_then_is_recorded_as_no_answer(cells):
    for key, row in _rows(cells, "tool_happy"):
        assert row["fact_calls"] == 2 and row["rounds"] == 3 and row["final_call"] == 1.0, (key, row)
        assert row["abstained"] is False  # never counted as a decline
    for key, row in _rows(cells, "tool_happy", loop=False):  # no loop: its call is left in its reply: no answer
        assert row["fact_calls"] == 0 and row["rounds"] == 1 and row["final_call"] == 1.0


def test_fact_call_metrics_match_the_calls_each_persona_made(cells):
    for key, row in _rows(cells, "never_calls"):
        assert (row["fact_calls"], row["rounds"], row["final_call"]) == (0, 1, 0.0), (key, row)
    for key, row in _rows(cells, "invalid_ids"):
        assert (row["fact_calls"], row["valid_calls"], row["final_call"]) == (1, 0, 0.0), (key, row)
        assert row["fact_call_log"][0]["found"] is False and row["prediction"]
    for key, row in _rows(cells, "malformed"):
        assert row["malformed_calls"] >= 1 and row["valid_calls"] == 0 and row["final_call"] == 1.0, (key, row)
    for persona in ("native_calls", "deepseek_calls", "glm_calls", "llama31_calls", "react_calls"):
        # every formatter reads every family's syntax
        english = [(k, row) for k, row in _rows(cells, persona) if row["qid"] in ("sc1:q1", "sc1:q2")]
        assert english and all(row["valid_calls"] == 1 and row["final_call"] == 0.0 and row["prediction"]
                               for _, row in english), (persona, english)


def test_every_metric_is_an_mlflow_metric_under_its_group(cells, uri):
    """The fact-call metrics reach MLflow's metric store (a dashboard charts them across runs), each metric
    under its group's prefix with its interval bounds, and read back under its own name."""
    import mlflow
    from dkilab.eval.tracking.store_uri import read_metrics

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)  # what a dashboard's notebook does
    try:
        runs = mlflow.search_runs(experiment_names=["ci-personas"], filter_string="tags.`dkilab.kind` = 'cell'",
                                  output_format="list")
    finally:
        mlflow.set_tracking_uri(before)
    by_name = {r.info.run_name: r for r in runs}
    checked = 0
    for (key, persona), r in cells.items():
        if key not in LOOP:
            continue
        run = by_name[r.cell.label]
        logged = run.data.metrics
        assert logged["fact/fact_call_rate"] == pytest.approx(r.metrics["fact_call_rate"]), (key, persona)
        assert logged["fact/final_call"] == pytest.approx(r.metrics["final_call"]), (key, persona)
        assert "uncertainty/fact_call_rate_ci95_low" in logged and "answers/score" in logged
        assert {k.split("/")[0] for k in logged if "/" in k} <= {"answers", "context", "fact", "uncertainty", "usage"}
        back = read_metrics(run, uri)
        assert all(back[k] == pytest.approx(v) for k, v in r.metrics.items() if v == v), (key, persona)
        checked += r.metrics["final_call"] > 0
    assert checked  # a persona whose forced last round was still a call: final_call > 0 is charted


def test_empty_and_rambling_replies(cells):
    for key, row in _rows(cells, "empty") + _rows(cells, "empty", loop=False):
        assert row["prediction"] == "" and row["final_call"] in (0.0, None)
    for key, row in _rows(cells, "rambling") + _rows(cells, "rambling", loop=False):
        assert 0 < row["generated_tokens"] <= 96, (key, row["generated_tokens"])
