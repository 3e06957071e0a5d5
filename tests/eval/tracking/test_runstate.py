"""Which runs count as finished, which RUNNING runs are dead, and the local-store locks."""
import os
import subprocess
import sys
import threading
import time

import pytest
from dkilab.eval.tracking import runstate


@pytest.fixture
def store(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runstate.open_store(uri)
    exp = mlflow.create_experiment("e")
    yield exp
    while mlflow.active_run():
        mlflow.end_run()


def _running(exp, tags):
    import mlflow

    return mlflow.MlflowClient().create_run(exp, tags=tags).info.run_id


def test_running_runs_are_killed_only_when_their_process_is_gone(store):
    import mlflow

    client = mlflow.MlflowClient()
    mine = _running(store, runstate.process_tags())  # this process: alive
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = _running(store, runstate.process_tags() | {"dkilab.pid": str(gone.pid)})
    # a pid that is alive again but belongs to another process (reused): its start time differs
    reused = _running(store, runstate.process_tags() | {"dkilab.pid_start": "12345.000"})
    elsewhere = _running(store, runstate.process_tags() | {"dkilab.host": "another-host", "dkilab.pid": str(gone.pid)})
    untagged = _running(store, {})
    assert sorted(runstate.mark_dead_runs_killed(store)) == sorted([dead, reused])
    status = {r: client.get_run(r).info.status for r in (mine, dead, reused, elsewhere, untagged)}
    assert status == {mine: "RUNNING", dead: "KILLED", reused: "KILLED", elsewhere: "RUNNING", untagged: "RUNNING"}


def test_only_finished_runs_with_the_completion_tag_count(store):
    import mlflow

    client = mlflow.MlflowClient()
    for status, complete in (("FINISHED", True), ("FINISHED", False), ("FAILED", True), ("KILLED", False)):
        tags = {"dkilab.kind": "cell", "dkilab.config_hash": f"{status}-{complete}"}
        run = client.create_run(store, tags=tags | ({runstate.COMPLETE_TAG: "1"} if complete else {}))
        client.set_terminated(run.info.run_id, status)
    assert set(runstate.finished_runs(store)) == {"FINISHED-True"}


def test_local_stores_are_locked_and_servers_are_not(tmp_path):
    assert runstate.local_store_dir(f"sqlite:///{tmp_path}/m.db") == tmp_path.resolve()
    assert runstate.local_store_dir(f"file://{tmp_path}/mlruns") == (tmp_path / "mlruns").resolve()
    assert runstate.local_store_dir("http://127.0.0.1:5000") is None
    assert runstate.local_store_dir("postgresql://u@h/db") is None
    with runstate.store_lock("http://127.0.0.1:5000", "x"):  # no file to lock: re-checks per cell instead
        pass
    uri, said, order = f"sqlite:///{tmp_path}/m.db", [], []

    def second():
        with runstate.store_lock(uri, "exp", echo=said.append):
            order.append("second")

    with runstate.store_lock(uri, "exp"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.5)
        order.append("first done")
    t.join(timeout=30)
    assert order == ["first done", "second"]
    assert said and f"pid {os.getpid()}" in said[0] and "waiting for it to finish" in said[0]


def test_a_write_refused_only_by_a_concurrent_insert_is_done_again_and_other_errors_are_not():
    from mlflow.exceptions import MlflowException

    calls = []

    def write(x):
        calls.append(x)
        if len(calls) == 1:  # what a 2-worker server answered when another process logged the same dataset
            raise MlflowException("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: "
                                  "datasets.experiment_id, datasets.name, datasets.digest")
        return x * 2

    assert runstate.on_conflict_retry(write, 21) == 42 and calls == [21, 21]

    def broken():
        calls.append("broken")
        raise MlflowException("RESOURCE_DOES_NOT_EXIST: run 'abc' not found")

    calls.clear()
    with pytest.raises(MlflowException, match="not found"):
        runstate.on_conflict_retry(broken)
    assert calls == ["broken"]  # not a conflict: raised at once, not repeated

    def always():
        calls.append("always")
        raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: tags.key")

    calls.clear()
    with pytest.raises(MlflowException, match="UNIQUE"):
        runstate.on_conflict_retry(always, tries=3)
    assert calls == ["always"] * 3  # a conflict that persists is raised in the end
