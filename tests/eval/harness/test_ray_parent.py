"""The Ray driver's one parent run, without a Ray cluster: the tasks run `ray_executor.run_cell` in threads of
their own (MLflow's active run is per thread, as it is per worker process), so every cell run must nest under
the driver's parent; the parent ends FINISHED, FAILED when a cell failed, and KILLED on Ctrl-C."""
import threading

import mlflow
import pytest
import yaml
from dkilab.eval.harness import ray_executor


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "parent.yaml"
    path.write_text(yaml.safe_dump({
        "name": "ray-parent", "tracing": False, "model": {"spec": "scripted:oracle", "max_context": 4096},
        "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}],
        "strategies": [{"name": "full_history"}], "sweep": {"full_history.history_budget": [64, 256]}}))
    return str(path), f"sqlite:///{tmp_path / 'mlflow.db'}"


def _in_threads(fail: set[int] = frozenset()):
    """A `_submit` running each cell's task in a thread of its own, one after another; cells in `fail` are not
    run and come back failed, as a task whose retries are spent."""
    def submit(cfg, cells, config_path, sets, limit, data_dir, uri, address, retries, gpus, parent, echo):
        outcomes = {}
        for i, cell in enumerate(cells):
            if i in fail:
                outcomes[cell.config_hash] = {"status": "failed", "error": "ray task failed: worker lost"}
                continue
            box = {}
            t = threading.Thread(target=lambda c=cell: box.update(ray_executor.run_cell(
                config_path, sets, limit, data_dir, uri, c.config_hash, parent)))
            t.start()
            t.join()
            outcomes[cell.config_hash] = box
        return outcomes
    return submit


def _runs(uri: str):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("ray-parent")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("dkilab.kind") == "experiment"]
    cells = [r for r in runs if r.data.tags.get("dkilab.kind") == "cell"]
    return parents, cells


def test_every_tasks_cell_nests_under_the_drivers_one_parent(config, monkeypatch):
    path, uri = config
    monkeypatch.setattr(ray_executor, "_submit", _in_threads())
    _, results = ray_executor.run_on_ray(path, uri=uri, echo=lambda *_: None)
    assert [r.error for r in results] == [None, None]
    parents, cells = _runs(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(cells) == 2 and all(c.info.status == "FINISHED" for c in cells)
    assert {c.data.tags.get("mlflow.parentRunId") for c in cells} == {parents[0].info.run_id}
    assert mlflow.active_run() is None


def test_a_failed_task_fails_the_parent_and_ctrl_c_kills_it(config, monkeypatch):
    path, uri = config
    monkeypatch.setattr(ray_executor, "_submit", _in_threads(fail={1}))
    _, results = ray_executor.run_on_ray(path, uri=uri, echo=lambda *_: None)
    assert results[0].error is None and "worker lost" in results[1].error
    parents, cells = _runs(uri)
    assert [p.info.status for p in parents] == ["FAILED"] and len(cells) == 1

    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(ray_executor, "_submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ray_executor.run_on_ray(path, uri=uri, echo=lambda *_: None)
    parents, _ = _runs(uri)
    assert sorted(p.info.status for p in parents) == ["FAILED", "KILLED"] and mlflow.active_run() is None
