"""Issue 31 item 1: generation and scoring are two steps. Every cell stores its answers; a cell whose
scoring part alone changed (a metric added, a judge) is scored again from them with no model under test
loaded, and `dkilab rescore` reproduces a run's metrics from its stored answers."""
import gzip
import json
import os

import pytest
import yaml
from dkilab.cli import main as cli
from dkilab.eval.harness import rescore
from dkilab.eval.harness.experiment import load_experiment
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import metric
from dkilab.eval.views.report import read_metrics

from tests.conftest import ROOT

SCRIPTED = ROOT / "experiments" / "ci" / "scripted_fact_calls.yaml"
QUIET = {"progress": False}


@pytest.fixture
def in_root():
    cwd = os.getcwd()
    os.chdir(ROOT)  # the scripted config names repository-relative files
    yield
    os.chdir(cwd)


def refuse_the_model(monkeypatch):
    """From here on, loading the model under test raises (the cell would fail): a re-scored cell must not
    need it."""
    import dkilab.eval.harness.prepare as prepare

    def refuse(cell):
        raise AssertionError(f"{cell.label}: the model under test was loaded")
    monkeypatch.setattr(prepare, "cell_model", refuse)


def _cells(uri, name):
    import mlflow

    mlflow.set_tracking_uri(uri)
    return [r for r in mlflow.search_runs(experiment_names=[name], output_format="list")
            if r.data.tags.get("dkilab.kind") == "cell"]


def _same(before: dict, after: dict) -> dict:
    """Metrics that differ, leaving out the harness overhead (it includes the scoring pass's own time)."""
    def differ(a, b) -> bool:  # metrics.json keeps 10 decimals
        return a is None or b is None or abs(a - b) > 1e-9 * max(1.0, abs(a))
    return {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
            if "overhead" not in k and differ(before.get(k), after.get(k))}


def test_the_identity_splits_into_generation_and_scoring(in_root):
    cfg = load_experiment(SCRIPTED)
    from dkilab.eval.harness.experiment import expand_cells

    cell = expand_cells(cfg)[0]
    assert "metrics" not in cell.generation_identity and "judge" not in cell.generation_identity
    assert "scorer" not in cell.generation_identity["dataset"] and "scorer" in cell.scoring_identity
    data = yaml.safe_load(SCRIPTED.read_text())
    with_judge = expand_cells(load_experiment_dict(data | {"judge": {"model": "offline:smollm2"}}))[0]
    other_scorer = expand_cells(load_experiment_dict(
        data | {"datasets": [data["datasets"][0] | {"scorer": "f1"}]}))[0]
    other_params = expand_cells(load_experiment_dict(
        data | {"defaults": {**data["defaults"], "max_new_tokens": 7}}))[0]
    for scoring_only in (with_judge, other_scorer):
        assert scoring_only.generation_hash == cell.generation_hash
        assert scoring_only.config_hash != cell.config_hash and scoring_only.scoring_hash != cell.scoring_hash
    assert other_params.generation_hash != cell.generation_hash and other_params.scoring_hash == cell.scoring_hash


def load_experiment_dict(data):
    from dkilab.eval.harness.experiment import experiment_from_dict

    return experiment_from_dict(data, "<test>")


@pytest.fixture
def drop_answer_chars():
    yield
    if "answer_chars" in METRICS:
        METRICS.remove("answer_chars")


def test_a_new_metric_rescores_every_finished_cell_without_the_model(tmp_path, in_root, monkeypatch, drop_answer_chars):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    cfg = load_experiment(SCRIPTED)
    first = run_experiment(cfg, uri=uri, echo=lambda *a: None, **QUIET)
    assert all(r.status == "finished" and "answer_chars" not in r.metrics for r in first)
    refuse_the_model(monkeypatch)
    metric("answer_chars", kind="any", rank=90, description="characters in the prediction")(
        lambda q: float(len(q.answer.text)))  # a metric added in one place after the run
    lines = []
    second = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lines.append, **QUIET)
    assert [r.status for r in second] == ["finished", "finished"]
    for a, b in zip(first, second):
        assert b.metrics["answer_chars"] == pytest.approx(
            sum(len(r["prediction"]) for r in a.rows) / len(a.rows))  # the new metric, from the stored answers
        assert _same(a.metrics, {k: v for k, v in b.metrics.items() if not k.startswith("answer_chars")}) == {}
        assert [r["fact_call_log"] for r in a.rows] == [r["fact_call_log"] for r in b.rows]
        assert [r.get("trace_id") for r in a.rows] == [r.get("trace_id") for r in b.rows]  # linked to the traces
    assert all("re-scored from the answers of run" in ln and "new: answer_chars" in ln for ln in lines if "@" in ln)
    runs = _cells(uri, cfg.name)
    rescored = [r for r in runs if rescore.RESCORED_TAG in r.data.tags]
    assert len(rescored) == 2 and all(r.data.tags[rescore.ANSWERS_TAG] == "1" for r in rescored)
    assert {r.data.tags[rescore.RESCORED_TAG] for r in rescored} == {r.run_id for r in first}
    # the report reads the re-scored runs (the newest per cell), the metric included
    from dkilab.eval.views.report import report

    table, _, _ = report(cfg.name, uri, allow_scripted=True, pairs=False, metrics=["answer_chars"])
    assert "answer_chars" in table.columns and len(table) == 2
    # and a third run finds everything finished
    third = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    assert [r.status for r in third] == ["skipped", "skipped"]


def test_dkilab_rescore_reproduces_the_metrics_exactly(tmp_path, in_root, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    first = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    refuse_the_model(monkeypatch)
    capsys.readouterr()
    assert cli(["rescore", "ci-scripted-fact-calls", "--tracking-uri", uri, "--metrics", "score,fact_call_rate"]) == 0
    out = capsys.readouterr().out
    assert out.count("every metric as before") == 2, out
    head = next(line for line in out.splitlines() if "fact_call_rate" in line)
    assert "score" in head and "prompt_tokens" not in head  # --metrics chose the columns
    runs = {r.info.run_name: r for r in sorted(_cells(uri, "ci-scripted-fact-calls"), key=lambda r: r.info.start_time)}
    for r in first:
        again = runs[r.cell.label]
        assert again.data.tags[rescore.RESCORED_TAG] == r.run_id
        assert _same(r.metrics, read_metrics(again, uri)) == {}
        assert again.data.params["metrics.version"] == r.cell.resolved["metrics"]["version"]  # the scoring version
    # a rescore of the rescored runs works too: the newest run of a cell always holds the answers
    assert cli(["rescore", str(SCRIPTED), "--tracking-uri", uri]) == 0
    assert capsys.readouterr().out.count("every metric as before") == 2


def test_a_judge_added_later_judges_the_stored_answers(tmp_path, in_root, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    script = tmp_path / "judge.yaml"
    script.write_text("answers: []\ndefault: CORRECT\n")
    data = yaml.safe_load(SCRIPTED.read_text())
    first = run_experiment(load_experiment_dict(data), uri=uri, echo=lambda *a: None, **QUIET)
    refuse_the_model(monkeypatch)  # the judge loads; the model under test does not
    assert all("judge_score" not in r.metrics for r in first)
    judged = run_experiment(load_experiment_dict(data | {"judge": {"model": f"scripted:{script}"}}), uri=uri,
                            echo=lambda *a: None, **QUIET)
    for a, b in zip(first, judged):
        assert b.status == "finished" and b.metrics["judge_score"] == 1.0
        assert all(r["judge_reply"] == "CORRECT" for r in b.rows if r["answerable"])
        assert [r["prediction"] for r in a.rows] == [r["prediction"] for r in b.rows]  # not generated again
    assert all(rescore.RESCORED_TAG in r.data.tags for r in _cells(uri, data["name"])
               if r.data.params.get("judge.model"))


def test_answers_that_no_longer_fit_the_questions_are_generated_again(tmp_path, in_root):
    """A dataset edited under the same spec: `run` generates the cell again; `rescore` fails it, naming why."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    cfg = load_experiment(SCRIPTED)
    (first, _) = run_experiment(cfg, uri=uri, echo=lambda *a: None, **QUIET)
    mlflow.set_tracking_uri(uri)
    path = mlflow.MlflowClient().download_artifacts(first.run_id, rescore.ANSWERS, str(tmp_path))
    lines = gzip.decompress(open(path, "rb").read()).decode().splitlines()
    torn = [lines[0], *(json.dumps(json.loads(x) | {"qid": "other"}) for x in lines[1:])]
    with open(path, "wb") as f:
        f.write(gzip.compress(("\n".join(torn) + "\n").encode()))
    with mlflow.start_run(run_id=first.run_id):
        mlflow.log_artifact(path)  # the stored answers now name other questions
    with pytest.raises(rescore.StoredAnswersError, match=r"question 'other'.*dataset changed"):
        from dkilab.eval.harness.cell import load_cell_questions
        rescore.read_answers(first.run_id, load_cell_questions(first.cell, None))
    out = []
    assert cli(["rescore", str(SCRIPTED), "--tracking-uri", uri]) == 1
    res = run_experiment(cfg, uri=uri, echo=out.append, rescore=True, **QUIET)
    assert res[0].error and "no stored answers" in res[0].error and res[1].status == "finished"
    assert any("dataset changed" in line for line in out)


def test_rescore_names_a_missing_experiment_in_one_line(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run_experiment(load_experiment_dict({"name": "tiny", "tracing": False, "strategies": [{"name": "recall_only"}],
                                         "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 1}]}),
                   uri=uri, echo=lambda *a: None, **QUIET)
    assert cli(["rescore", "tinny", "--tracking-uri", uri]) != 0
    err = capsys.readouterr().err
    assert "no MLflow experiment named 'tinny'" in err and "did you mean 'tiny'" in err and "Traceback" not in err


def test_editing_a_harness_or_summary_prompt_changes_the_cells_it_reaches(in_root, monkeypatch):
    """CHOOSE (the multiple-choice line the harness adds) and the LLM summary prompt are in the identity of
    the cells that can reach them, and only of those."""
    from dkilab import prompts
    from dkilab.eval.harness.experiment import expand_cells
    from dkilab.text import summarize

    data = yaml.safe_load(SCRIPTED.read_text())
    data["strategies"][1]["params"]["recall"]["summary"]["strategy"] = "llm"

    def hashes():
        cells = expand_cells(load_experiment_dict(data)) + expand_cells(load_experiment_dict(
            {"name": "f", "strategies": [{"name": "recall_v4"}], "datasets": [{"name": "fixtures"}],
             "defaults": {"history_budget": 512}}))
        return [(c.generation_hash, c.config_hash) for c in cells]

    before = hashes()
    monkeypatch.setitem(prompts.CHOOSE, "en", "Reply with one letter.")
    after_choose = hashes()
    assert after_choose[0] != before[0] and after_choose[1] != before[1]  # a file dataset may be multiple choice
    assert after_choose[2] == before[2]  # the fixtures are not: their cells stay
    monkeypatch.setitem(summarize.LLM_SUMMARY_PROMPT, "en", summarize.LLM_SUMMARY_PROMPT["en"] + " Be brief.")
    after_summary = hashes()
    assert after_summary[1] != after_choose[1]  # the cell that summarises with the model
    assert after_summary[0] == after_choose[0] and after_summary[2] == after_choose[2]


def test_ctrl_c_while_rescoring_leaves_the_cell_to_the_next_run(tmp_path, in_root, monkeypatch, drop_answer_chars):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    first = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    refuse_the_model(monkeypatch)
    metric("answer_chars", kind="any", rank=90)(lambda q: float(len(q.answer.text)))
    real = rescore.rescore_cell

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(rescore, "rescore_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    mlflow.set_tracking_uri(uri)
    stopped = [r for r in _cells(uri, SCRIPTED_NAME) if rescore.RESCORED_TAG in r.data.tags]
    assert [r.info.status for r in stopped] == ["KILLED"] and "dkilab.complete" not in stopped[0].data.tags
    monkeypatch.setattr(rescore, "rescore_cell", real)
    again = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    assert [r.status for r in again] == ["finished", "finished"]
    assert all("answer_chars" in r.metrics and r.rows[0]["prediction"] == f.rows[0]["prediction"]
               for r, f in zip(again, first))


SCRIPTED_NAME = "ci-scripted-fact-calls"


def test_answers_stored_before_kind_and_review_read_back_with_them():
    """Answers journalled or stored with their flags and review fields in `metadata` (before Answer.kind and
    Answer.review) are read back with them moved over, so a resume or a rescore scores them the same."""
    from dkilab.eval.tracking.journal import answer_from_json

    old = {"text": "", "metadata": {"task": "pointer", "pointer": {"fell_back": True}, "policy_steps": 1}}
    a = answer_from_json(old)
    assert a.kind == "pointer" and a.review == {"pointer": {"fell_back": True}} and a.metadata == {"policy_steps": 1}
    assert answer_from_json({"text": "", "metadata": {"retrieval_only": True}}).kind == "ranking"
    assert answer_from_json({"text": "", "metadata": {"context_only": True}}).kind == "context"
    assert answer_from_json({"text": "x", "kind": "answer",
                             "review": {"formatter": "generic"}}).review == {"formatter": "generic"}


def test_a_scoring_error_fails_the_rescored_cell_and_the_next_run_redoes_it(tmp_path, in_root, monkeypatch,
                                                                             drop_answer_chars):
    """A scorer or judge that raises while re-scoring: the new run ends FAILED with its traceback, never counts
    as finished, and the next run re-scores the cell (still without the model)."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    refuse_the_model(monkeypatch)
    metric("answer_chars", kind="any", rank=90)(lambda q: float(len(q.answer.text)))
    real = rescore.rescore_cell

    def broken(*a, **k):
        raise ValueError("scorer exploded")
    monkeypatch.setattr(rescore, "rescore_cell", broken)
    lines = []
    failed = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lines.append, **QUIET)
    assert all(r.status == "failed" and "scorer exploded" in r.error for r in failed)
    assert sum("re-scoring FAILED" in ln for ln in lines) == 2
    mlflow.set_tracking_uri(uri)
    bad = [r for r in _cells(uri, SCRIPTED_NAME) if r.info.status == "FAILED"]
    assert len(bad) == 2 and all("cell_error.txt" in {a.path
                                                      for a in mlflow.MlflowClient().list_artifacts(r.info.run_id)}
                                 for r in bad)
    monkeypatch.setattr(rescore, "rescore_cell", real)
    again = run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, **QUIET)
    assert [r.status for r in again] == ["finished", "finished"] and all("answer_chars" in r.metrics for r in again)
