"""`dkilab run CONFIG --executor ray` on a Ray cluster started on this machine: every cell runs exactly once
into the tracking store, and the cell whose worker is killed (SIGKILL, mid-cell) is retried by Ray and
finishes; its dead run is marked KILLED."""
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


def _runs(uri: str, name: str) -> list[tuple[str, str, str]]:
    """(cell, status, pid) of each cell run of the experiment."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], "tags.`dkilab.kind` = 'cell'")
    return sorted((r.info.run_name, r.info.status, r.data.tags.get("dkilab.pid", "")) for r in runs)


def test_each_cell_runs_once_on_ray_and_a_killed_workers_cell_is_retried(tmp_path):
    from tests.fake_openai import Server

    server = Server(delay=0.15)  # each cell takes seconds: there is time to kill its worker mid-cell
    try:
        path = tmp_path / "ray.yaml"
        path.write_text(yaml.safe_dump({
            "name": "on-ray", "tracing": False, 
            "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096, "concurrency": 1},
            "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 12}],
            "strategies": [{"name": "full_history"}], "sweep": {"params.history_budget": [64, 128, 256]}}))
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_DISABLE_USAGE_STATS": "1"}
        log = (tmp_path / "driver.txt").open("w")
        driver = subprocess.Popen([sys.executable, "-m", "dkilab.cli", "run", str(path), "--executor", "ray",
                                   "--tracking-uri", uri, "--retries", "2"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, env=env, text=True)
        killed = None
        deadline = time.monotonic() + 240
        while killed is None and time.monotonic() < deadline and driver.poll() is None:
            running = [(c, pid) for c, s, pid in _runs(uri, "on-ray") if s == "RUNNING" and pid]
            if running:  # the first cell to start: kill the Ray worker that runs it
                cell, pid = running[0]
                assert int(pid) != driver.pid  # a worker process, not the driver
                os.kill(int(pid), signal.SIGKILL)
                killed = cell
            time.sleep(0.1)
        rc = driver.wait(timeout=300)
        out = (tmp_path / "driver.txt").read_text()
        assert killed is not None, out[-3000:]
        assert rc == 0, out[-3000:]
    finally:
        server.close()
    runs = _runs(uri, "on-ray")
    cells = {c for c, _, _ in runs}
    assert len(cells) == 3
    for cell in cells:  # exactly one finished run per cell; the killed cell also keeps its dead run, KILLED
        statuses = sorted(s for c, s, _ in runs if c == cell)
        assert statuses == (["FINISHED", "KILLED"] if cell == killed else ["FINISHED"]), (cell, statuses)
    assert "ray: 3 cell(s) submitted" in out and out.count(": finished") + out.count(": skipped") >= 3


def test_a_cell_that_fails_on_ray_fails_the_run_once_and_the_others_finish(tmp_path):
    """A cell error is the cell's outcome, not a crash: Ray does not retry it, the run exits 1 naming it."""
    from tests.fake_openai import Server

    server = Server()
    try:
        path = tmp_path / "ray.yaml"
        path.write_text(yaml.safe_dump({
            "name": "on-ray-fail", "tracing": False,
            "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096},
            "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 4}],
            # stable injects the fixtures' preferences as K/V: an endpoint cannot, so its cell fails
            "strategies": [{"name": "full_history"}, {"name": "stable"}]}))
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_DISABLE_USAGE_STATS": "1"}
        out = subprocess.run([sys.executable, "-m", "dkilab.cli", "run", str(path), "--executor", "ray",
                              "--tracking-uri", uri], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    finally:
        server.close()
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "FAILED: stable@fixtures: cell failed (KVUnsupportedError" in out.stderr
    assert [(c, s) for c, s, _ in _runs(uri, "on-ray-fail")] == [("full_history@fixtures", "FINISHED"),
                                                                 ("stable@fixtures", "FAILED")]
