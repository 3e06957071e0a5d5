"""Every text strategy driven by scripted personas that behave like real models
(experiments/ci/personas.yaml): the invariants hold on every cell, and each persona's fact-call metrics
match the calls it made."""
import os

import pytest

from dkilab.models.tool_calls import parse_tool_calls
from tests.conftest import ROOT

CONFIG = ROOT / "experiments" / "ci" / "personas.yaml"
LOOP = {"generic", "deepseek", "glm", "native"}  # the recall_v4 cells: retrieve_fact offered


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from dkilab.eval.experiment import load_experiment
    from dkilab.eval.runner import check_expectations, run_experiment

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        cfg = load_experiment(CONFIG)
        results = run_experiment(cfg, uri=f"sqlite:///{tmp_path_factory.mktemp('personas') / 'm.db'}",
                                 progress=False, echo=lambda *a: None)
    finally:
        os.chdir(cwd)
    assert check_expectations(cfg, results) == []
    return {(r.cell.strategy.key, r.cell.model.spec.rsplit("/", 1)[1].removesuffix(".yaml")): r for r in results}


def _rows(cells, persona, loop=True):
    return [(key, row) for (key, p), r in cells.items() if p == persona and (key in LOOP) == loop for row in r.rows]


def test_every_cell_ran_and_no_call_is_ever_recorded_as_an_answer(cells):
    assert len(cells) == 5 * 9
    for (key, persona), r in cells.items():
        assert len(r.rows) == 4 and r.metrics["errors"] == 0, (key, persona)
        if key in LOOP:
            for row in r.rows:
                text = row["prediction"] or ""
                assert "retrieve_fact" not in text and not parse_tool_calls(text), (key, persona, text)
                assert row["final_call"] in (0.0, 1.0)
                assert (row["final_call"] == 1.0) == (text == "" and row["fact_calls"] > 0), (key, persona, row)


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
    for key, row in _rows(cells, "tool_happy", loop=False):  # no loop: its text is its answer, no call counted
        assert row["fact_calls"] == 0 and row["rounds"] == 1


def test_fact_call_metrics_match_the_calls_each_persona_made(cells):
    for key, row in _rows(cells, "never_calls"):
        assert (row["fact_calls"], row["rounds"], row["final_call"]) == (0, 1, 0.0), (key, row)
    for key, row in _rows(cells, "invalid_ids"):
        assert (row["fact_calls"], row["valid_calls"], row["final_call"]) == (1, 0, 0.0), (key, row)
        assert row["fact_call_log"][0]["found"] is False and row["prediction"]
    for key, row in _rows(cells, "malformed"):
        assert row["malformed_calls"] >= 1 and row["valid_calls"] == 0 and row["final_call"] == 1.0, (key, row)
    for persona in ("native_calls", "deepseek_calls", "glm_calls"):  # every formatter reads every family's syntax
        english = [(k, row) for k, row in _rows(cells, persona) if row["qid"] in ("sc1:q1", "sc1:q2")]
        assert english and all(row["valid_calls"] == 1 and row["final_call"] == 0.0 and row["prediction"]
                               for _, row in english), (persona, english)


def test_empty_and_rambling_replies(cells):
    for key, row in _rows(cells, "empty") + _rows(cells, "empty", loop=False):
        assert row["prediction"] == "" and row["final_call"] in (0.0, None)
    for key, row in _rows(cells, "rambling") + _rows(cells, "rambling", loop=False):
        assert 0 < row["generated_tokens"] <= 96, (key, row["generated_tokens"])
