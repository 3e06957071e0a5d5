"""The experiment runner end to end: CI configs into a temporary MLflow store, error rows, resume."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dkilab.eval.experiment import expand_cells, load_experiment, parse_set
from dkilab.eval.runner import check_expectations, run_experiment
from dkilab.strategies import STRATEGIES, register
from dkilab.strategies.no_memory import NoMemory
from tests.conftest import ROOT

CI_CONFIGS = sorted((ROOT / "experiments" / "ci").glob("*.yaml"))
CELL_METRICS = {"score", "questions", "errors", "prompt_tokens", "hallucination_rate", "latency_total_p50_ms",
                "questions_per_minute", "harness_overhead_p50_ms"}


@pytest.fixture
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _cell_runs(uri, name):
    import mlflow

    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(name)
    return mlflow.search_runs([exp.experiment_id], filter_string="tags.`dkilab.kind` = 'cell'", output_format="list")


@pytest.mark.parametrize("path", CI_CONFIGS, ids=[p.stem for p in CI_CONFIGS])
def test_ci_config_runs_end_to_end(path, uri, model):
    import mlflow

    cfg = load_experiment(path)
    results = run_experiment(cfg, uri=uri, config_path=str(path), progress=False, echo=lambda *a: None)
    assert check_expectations(cfg, results) == []
    runs = _cell_runs(uri, cfg.name)
    assert len(runs) == len(expand_cells(cfg)) and all(r.info.status == "FINISHED" for r in runs)
    client = mlflow.MlflowClient(uri)
    for run in runs:
        assert CELL_METRICS <= set(run.data.metrics), CELL_METRICS - set(run.data.metrics)
        assert any(k.startswith("cat/") for k in run.data.metrics)
        assert run.data.params["strategy.name"] in STRATEGIES
        arts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"predictions.jsonl", "resolved_config.yaml", "score_by_category.png"} <= arts
    if cfg.tracing:
        traces = mlflow.search_traces(locations=[runs[0].info.experiment_id], return_type="list")
        spans = {s.name for t in traces for s in t.data.spans}
        assert {"recall", "assembly", "generation"} <= spans and any(n.startswith("question ") for n in spans)


class Boom(NoMemory):
    """Fails on questions that mention Pixel (for the error-row test)."""
    name = "test_boom"

    def _answer(self, question, memory, model, **kw):
        if "Pixel" in question:
            raise RuntimeError("boom on purpose")
        return super()._answer(question, memory, model, **kw)


def _config(tmp_path, name, **extra):
    data = {"name": name, "model": {"max_context": 512}, "defaults": {"max_new_tokens": 2}, "tracing": False,
            "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}],
            "strategies": [{"name": "no_memory"}, {"name": "test_boom"}]} | extra
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def boom_strategy():
    """Registered only while a test needs it (the registry test runs every registered strategy)."""
    register(Boom)
    yield Boom
    STRATEGIES.pop(Boom.name, None)


def test_error_rows_do_not_stop_the_run_and_finished_cells_are_skipped(tmp_path, uri, model, boom_strategy):
    import mlflow

    cfg = load_experiment(_config(tmp_path, "errors"))
    first = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    boom = next(r for r in first if r.cell.strategy.name == "test_boom")
    assert boom.metrics["errors"] == 1 and boom.metrics["questions"] == 2  # question 2 still answered
    errors = Path(mlflow.MlflowClient(uri).download_artifacts(boom.run_id, "errors.txt")).read_text()
    assert "boom on purpose" in errors and "Traceback" in errors
    again = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    assert all(r.skipped for r in again)
    assert len(_cell_runs(uri, "errors")) == 2
    from dkilab.eval.tracking import report

    table = report("errors", uri)  # `dkilab report errors`
    assert list(table.index) == ["no_memory@fixtures", "test_boom@fixtures"] and table.loc["test_boom@fixtures", "errors"] == 1
    with pytest.raises(KeyError, match="no MLflow experiment named 'nope'"):
        report("nope", uri)


def test_a_killed_sweep_resumes_without_redoing_finished_cells(tmp_path, uri, model):
    path = _config(tmp_path, "resume", strategies=[{"name": "no_memory"}], sweep={"params.max_new_tokens": [1, 2, 3]})
    cmd = [sys.executable, "-m", "dkilab.cli", "run", str(path), "--tracking-uri", uri]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    for line in proc.stdout:
        if line.startswith("[1/3]"):
            os.killpg(proc.pid, signal.SIGKILL)  # killed while the second cell runs
            break
    proc.wait()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=True).stdout
    assert "[1/3]" in out and "skipped" in out.split("[1/3]")[1].splitlines()[0]
    assert "score" in out.split("[2/3]")[1].splitlines()[0] and "score" in out.split("[3/3]")[1].splitlines()[0]
    finished = [r for r in _cell_runs(uri, "resume") if r.info.status == "FINISHED"]
    assert len(finished) == 3


def test_config_errors_name_the_file_and_key(tmp_path, boom_strategy):
    bad = _config(tmp_path, "bad", strategies=[{"name": "no_such"}])
    with pytest.raises(ValueError, match=r"bad\.yaml.*strategies\.0\.name.*no_such"):
        load_experiment(bad)
    with pytest.raises(ValueError, match=r"sweep\.nothing\.x"):
        load_experiment(_config(tmp_path, "bad2", sweep={"nothing.x": [1]}))
    with pytest.raises(ValueError, match=r"datasets\.0\.question_limit"):
        load_experiment(_config(tmp_path, "bad3"), {"datasets.0.question_limit": -1})
    assert parse_set(["params.preference_alpha=0.2", "model.spec=offline:smollm2"]) == {
        "params.preference_alpha": 0.2, "model.spec": "offline:smollm2"}


def test_sweep_grid_applies_keys_where_they_belong(tmp_path):
    cfg = load_experiment(_config(tmp_path, "grid", strategies=[{"name": "no_memory"}, {"name": "stable"}],
                                  sweep={"params.preference_alpha": [0.2, 0.6], "stable.recent_turns": [1, 3]}))
    cells = expand_cells(cfg)
    # no_memory has neither parameter: one cell; stable: 2 x 2
    assert sorted(c.strategy.name for c in cells) == ["no_memory"] + ["stable"] * 4
    assert {(c.strategy.params["preference_alpha"], c.strategy.params["recent_turns"])
            for c in cells if c.strategy.name == "stable"} == {(0.2, 1), (0.2, 3), (0.6, 1), (0.6, 3)}
    assert len({c.config_hash for c in cells}) == 5


EXPERIMENTS = sorted(p for p in (ROOT / "experiments").glob("*.yaml") if not p.stem.startswith("retrieval_"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_every_experiment_config_validates(path):
    from dkilab.strategies import create_strategy

    cfg = load_experiment(path)
    cells = expand_cells(cfg)
    assert cells and len({c.label for c in cells}) == len(cells)
    for cell in cells:  # strategy params are valid too
        create_strategy(cell.strategy.name, cell.strategy.params, source=str(path))


@pytest.mark.slow
def test_accelerate_launch_shards_questions_over_two_cpu_processes(tmp_path, uri, model):
    import mlflow

    path = _config(tmp_path, "sharded", strategies=[{"name": "no_memory"}])
    launcher = Path(sys.executable).parent / "accelerate"
    out = subprocess.run([str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "dkilab.cli", "run", str(path),
                          "--tracking-uri", uri], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = _cell_runs(uri, "sharded")
    assert len(runs) == 1 and runs[0].data.metrics["questions"] == 2  # both shards gathered, logged once
    rows = Path(mlflow.MlflowClient(uri).download_artifacts(runs[0].info.run_id, "predictions.jsonl")).read_text()
    assert len(rows.strip().splitlines()) == 2


def test_llm_judge_scores_answers_and_logs_its_model_and_prompt(tmp_path, uri, model):
    import mlflow

    path = _config(tmp_path, "judged", strategies=[{"name": "no_memory"}],
                   judge={"model": "offline:smollm2", "prompt": "Gold: {gold}\nQ: {question}\nA: {prediction}\n"
                                                               "Reply CORRECT or WRONG."})
    cfg = load_experiment(path)
    (res,) = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    judged = [r for r in res.rows if r["answerable"]]
    assert judged and all("judge" in r and r["judge_reply"] for r in judged)
    assert all(r["judge"] is None for r in res.rows if not r["answerable"])  # abstention scores those
    assert ("judge_score" in res.metrics) == any(r["judge"] is not None for r in judged)
    assert 0 <= res.metrics["judge_unparsed_rate"] <= 1
    (run,) = _cell_runs(uri, "judged")
    assert run.data.params["judge.model"] == "offline:smollm2" and "{prediction}" in run.data.params["judge.prompt"]
    arts = {a.path for a in mlflow.MlflowClient(uri).list_artifacts(run.info.run_id)}
    assert "judge_prompt.txt" in arts
    bad = _config(tmp_path, "badjudge", judge={"prompt": "no placeholders"})
    with pytest.raises(ValueError, match=r"judge.*placeholder"):
        load_experiment(bad)
