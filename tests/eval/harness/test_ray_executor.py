"""`dkilab run CONFIG --executor ray` on a Ray cluster started on this machine: every cell runs exactly once
into the tracking store, the cell whose worker is killed (SIGKILL, mid-cell) is retried by Ray and finishes
(its dead run marked KILLED), a cell that fails fails once, and every cell run nests under the driver's one
parent run. One cluster for all of it: starting Ray on two cores is most of the cost."""
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("ray")


def _runs(uri: str, name: str) -> list[tuple[str, str, str, str, str]]:
    """(run name, status, pid, kind, parent run id) of each run of the experiment."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return []
    return sorted((r.info.run_name, r.info.status, r.data.tags.get("dkilab.pid", ""),
                   r.data.tags.get("dkilab.kind", ""), r.data.tags.get("mlflow.parentRunId", r.info.run_id))
                  for r in client.search_runs([exp.experiment_id]))


def test_on_ray_each_cell_runs_once_a_killed_workers_cell_is_retried_a_failure_fails_once_under_one_parent(
        tmp_path):
    from tests.fake_openai import Server

    server = Server(delay=1.0)  # each cell takes 4 s or more: time to kill its worker mid-cell on a busy machine
    try:
        path = tmp_path / "ray.yaml"
        path.write_text(yaml.safe_dump({
            "name": "on-ray", "tracing": False,
            "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096, "concurrency": 1},
            "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 4}],
            # stable injects the fixtures' preferences as K/V: an endpoint cannot, so its cell fails
            "strategies": [{"name": "full_history"}, {"name": "stable"}],
            "sweep": {"full_history.history_budget": [64, 256]}}))
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        _runs(uri, "on-ray")  # the store's tables exist before the driver and this test's polling both open it
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_DISABLE_USAGE_STATS": "1"}
        log = (tmp_path / "driver.txt").open("w")
        driver = subprocess.Popen([sys.executable, "-m", "dkilab.cli", "run", str(path), "--executor", "ray",
                                   "--tracking-uri", uri, "--retries", "2"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, env=env, text=True)
        killed = None
        deadline = time.monotonic() + 240
        while killed is None and time.monotonic() < deadline and driver.poll() is None:
            running = [(c, pid) for c, s, pid, kind, _ in _runs(uri, "on-ray")
                       if kind == "cell" and s == "RUNNING" and pid and c.startswith("full_history")]
            if running:  # the first full_history cell to start: kill the Ray worker that runs it
                cell, pid = running[0]
                assert int(pid) != driver.pid  # a worker process, not the driver
                os.kill(int(pid), signal.SIGKILL)
                killed = cell
            time.sleep(0.1)
        rc = driver.wait(timeout=600)
        out = (tmp_path / "driver.txt").read_text()
        assert killed is not None, out[-3000:]
        assert rc == 1, out[-3000:]  # the stable cell failed
    finally:
        server.close()
    runs = _runs(uri, "on-ray")
    parents = [r for r in runs if r[3] == "experiment"]
    cells = [r for r in runs if r[3] == "cell"]
    assert len(parents) == 1, parents  # the driver's; no task left a parent of its own
    [(_, parent_status, parent_pid, _, parent_id)] = parents
    assert parent_status == "FAILED" and int(parent_pid) == driver.pid
    assert {p for *_, p in cells} == {parent_id}  # every cell run, killed, failed or finished, nests under it
    names = {c for c, *_ in cells}
    assert len(names) == 3
    for name in names:  # exactly one finished run per cell; the killed cell also keeps its dead run, KILLED
        statuses = sorted(s for c, s, *_ in cells if c == name)
        want = ["FAILED"] if name.startswith("stable") else ["FINISHED", "KILLED"] if name == killed else ["FINISHED"]
        assert statuses == want, (name, statuses)
    assert "ray: 3 cell(s) submitted" in out and out.count(": finished") + out.count(": skipped") >= 2
    assert "stable@fixtures: cell failed (KVUnsupportedError" in out
