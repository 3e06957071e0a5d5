"""Cells spread over machines (`dkilab run --claim`): two processes on one config against one tracking
server each run different cells, every cell exactly once; a claim whose process died (kill -9) or whose
cell failed goes back to the pool."""
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import ROOT, mlflow_server


@pytest.fixture
def server(tmp_path):
    with mlflow_server(tmp_path, workers=2) as url:
        yield url


def _config(tmp_path, name="claims"):
    cfg = {"name": name, "tracing": False, "datasets": [{"name": "fixtures", "limit": 2, "question_limit": 2}],
           "strategies": [{"name": "recall_only"}], "sweep": {"params.max_results": [3, 5, 8, 10, 12, 15]}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cell_runs(url, name):
    import mlflow

    client = mlflow.MlflowClient(url)
    exp = client.get_experiment_by_name(name)
    return client.search_runs([exp.experiment_id], "tags.`dkilab.kind` = 'cell'")


def _cause_lines(stderr: str) -> list[str]:
    """The lines of a process's stderr that can name why it failed: not progress bars or INFO chatter."""
    lines = [ln.strip() for ln in stderr.replace("\r", "\n").splitlines()]
    return [ln for ln in lines if ln and "it/s]" not in ln and "s/it]" not in ln and not ln.startswith("INFO")][-25:]


@pytest.mark.slow
def test_two_machines_share_a_config_each_cell_runs_once(tmp_path, server):
    path = _config(tmp_path)
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "dkilab.cli", "run", str(path), "--claim", "--tracking-uri", server]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for i, (out, err) in enumerate(outs):  # kept whole for a failure's post-mortem
        (tmp_path / f"proc{i}.out").write_text(out)
        (tmp_path / f"proc{i}.err").write_text(err)
    # on failure: each process's exit code and the lines that name a cause (progress bars left out)
    assert all(p.returncode == 0 for p in procs), [(p.returncode, _cause_lines(o[1]), o[0][-600:]) for p,
                                                   o in zip(procs, outs)]
    runs = _cell_runs(server, "claims")
    hashes = [r.data.tags["dkilab.config_hash"] for r in runs]
    assert len(hashes) == 6 == len(set(hashes))  # every cell exactly once
    assert all(r.info.status == "FINISHED" for r in runs)
    ran = [o[0].count("recall_only") - o[0].count("claimed by") - o[0].count("finished before") for o in outs]
    left = [o[0].count("claimed by") for o in outs]
    assert sum(left) >= 1, outs[0][0]  # the second process found cells the first held ...
    assert all(n >= 1 for n in ran) or sum(left) == 6, (ran, left)  # ... and (timing allowing) both worked


@pytest.mark.slow
def test_two_processes_logging_one_dataset_at_one_moment_both_land(tmp_path, server):
    """The cause of this file's old flake: MLflow's SQL store reads "is this dataset logged?" and inserts it in
    two steps, so two cells of one dataset logging their input at one moment through a 2-worker server made
    one fail on the unique constraint (14 of 40 rounds in `experiments/bench/concurrency.py`), and its cell
    FAILED. Each round logs a new dataset from two threads released together; every input must land, on one
    dataset row."""
    import threading

    import mlflow
    import pandas as pd
    from dkilab.eval.tracking.runstate import on_conflict_retry  # what tracking.log_questions logs the dataset through

    client = mlflow.MlflowClient(server)
    exp = client.create_experiment("race")
    failures: list[str] = []
    rounds = 40
    for i in range(rounds):
        runs = [client.create_run(exp).info.run_id for _ in range(2)]
        data = mlflow.data.from_pandas(pd.DataFrame({"question": [f"q{i}"], "gold": ["a"]}), name=f"fixtures {i}",
                                       targets="gold")
        entity = mlflow.entities.DatasetInput(data._to_mlflow_entity(), tags=[])
        gate = threading.Barrier(2)

        def log(run_id):
            gate.wait()
            try:
                on_conflict_retry(client.log_inputs, run_id, datasets=[entity])
            except Exception as e:  # noqa: BLE001 - counted and shown
                failures.append(str(e)[:200])

        threads = [threading.Thread(target=log, args=(r,)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(len(client.get_run(r).inputs.dataset_inputs) == 1 for r in runs), i
    assert failures == []
    names = {d.dataset.name for r in client.search_runs([exp], max_results=1000) for d in r.inputs.dataset_inputs}
    assert len(names) == rounds


def test_a_dead_claim_and_a_failed_cell_go_back_to_the_pool(tmp_path, monkeypatch):
    import mlflow
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.eval.tracking import runstate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    cfg = load_experiment(_config(tmp_path, "pool"))
    from dkilab.eval.harness.experiment import check_config

    first, second, *_ = check_config(cfg)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    client = mlflow.MlflowClient()
    # a machine killed with -9 left its claim on the first cell; a live one holds the second
    client.create_experiment(runstate.claim_name("pool", first.config_hash), tags={
        "dkilab.host": runstate.socket.gethostname(), "dkilab.pid": str(dead.pid), "dkilab.pid_start": "1",
        "dkilab.claimed_at": str(time.time())})
    client.create_experiment(runstate.claim_name("pool", second.config_hash), tags={
        "dkilab.host": "another-machine", "dkilab.pid": "1", "dkilab.claimed_at": str(time.time())})
    lines = []
    results = run_experiment(cfg, uri=uri, progress=False, echo=lines.append, claim=True)
    assert [r.status for r in results] == ["finished", "claimed"] + ["finished"] * 4
    assert any("claimed by another-machine pid 1, left to it" in ln for ln in lines)
    # a claim whose heartbeat stopped is taken over as well, and the run its holder left RUNNING is ended
    exp_id = client.get_experiment_by_name("pool").experiment_id
    orphan = client.create_run(exp_id, tags={"dkilab.kind": "cell", "dkilab.config_hash": second.config_hash,
                                             "dkilab.host": "another-machine", "dkilab.pid": "1"})
    monkeypatch.setenv("DKILAB_CLAIM_STALE_S", "0")
    results = run_experiment(cfg, uri=uri, progress=False, echo=lambda _: None, claim=True)
    assert results[1].status == "finished"
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    # a finished cell's claim is removed: no dkilab-claim experiment outlives its cell
    assert all(client.get_experiment_by_name(runstate.claim_name("pool", r.cell.config_hash)) is None for r in results)

    # a cell that fails here gives its claim back, so another run retries it
    import dkilab.eval.harness.prepare as prepare

    def boom(*a, **k):
        raise RuntimeError("no data")

    monkeypatch.setattr(prepare, "load_cell_data", boom)
    cfg2 = load_experiment(_config(tmp_path, "failing"))
    results = run_experiment(cfg2, uri=uri, progress=False, echo=lambda _: None, claim=True)
    assert all(r.status == "failed" for r in results)
    assert all(client.get_experiment_by_name(runstate.claim_name("failing", r.cell.config_hash)) is None
               for r in results)


def test_a_live_claim_is_kept_by_its_heartbeat_however_long_the_cell_runs(tmp_path, monkeypatch):
    """Issue 58 item 10: a TTL from the claim's start stole live claims (any cell over 24 h ran twice). The
    holder now stamps a heartbeat; only a claim whose beats stopped is taken over."""
    import mlflow
    from dkilab.eval.tracking import runstate

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    monkeypatch.setenv("DKILAB_CLAIM_STALE_S", "1.5")
    long_ago = str(time.time() - 3 * 24 * 3600)  # claimed three days ago, on another machine
    exp = client.create_experiment(runstate.claim_name("beat", "h1"), tags={
        "dkilab.host": "another-machine", "dkilab.pid": "1", "dkilab.claimed_at": long_ago,
        runstate.HEARTBEAT_TAG: long_ago})
    with runstate.claim_heartbeat("beat", "h1", every_s=0.2):  # stands for the other machine, still beating
        time.sleep(2.0)
        assert runstate.claim_cell("beat", "h1") == (False, "another-machine pid 1")
    time.sleep(2.0)  # beats stopped: stale after 1.5 s
    assert runstate.claim_cell("beat", "h1") == (True, "this process")
    assert client.get_experiment(exp).lifecycle_stage == "deleted"


def test_a_heartbeat_never_stamps_a_claim_another_machine_took_over(tmp_path):
    import mlflow
    from dkilab.eval.tracking import runstate

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    assert runstate.claim_cell("over", "h1") == (True, "this process")
    with runstate.claim_heartbeat("over", "h1", every_s=0.1):
        runstate.release_claim("over", "h1")  # our claim went stale and another machine took the cell
        theirs = client.create_experiment(runstate.claim_name("over", "h1"), tags={
            "dkilab.host": "another-machine", "dkilab.pid": "1", runstate.HEARTBEAT_TAG: "1"})
        time.sleep(0.6)
    assert client.get_experiment(theirs).tags[runstate.HEARTBEAT_TAG] == "1"


def test_ctrl_c_in_a_claimed_cell_gives_the_claim_back(tmp_path, monkeypatch):
    import dkilab.eval.harness.runner as runner
    import mlflow
    from dkilab.eval.harness.experiment import check_config, load_experiment
    from dkilab.eval.tracking import runstate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = load_experiment(_config(tmp_path, "interrupted"))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run_experiment(cfg, uri=uri, progress=False, echo=lambda _: None, claim=True)
    mlflow.set_tracking_uri(uri)
    first = check_config(cfg)[0]
    assert mlflow.MlflowClient().get_experiment_by_name(runstate.claim_name("interrupted", first.config_hash)) is None
    assert runstate.claim_cell("interrupted", first.config_hash) == (True, "this process")  # free to take again


def test_a_holder_whose_claim_was_taken_over_writes_no_finished_run(tmp_path, monkeypatch):
    """Issue 85 item 7: a holder paused (SIGSTOP) past the stale time lost its claim; the taker finished the cell,
    then the holder woke and finished it too: two FINISHED runs. The claim's experiment id is a fencing token: a
    claim taken over is another experiment, so the holder ends its run KILLED (however the clocks disagree) and
    leaves the new holder's claim alone."""
    import dkilab.eval.harness.cell_run as cell_run
    import dkilab.eval.harness.runner as runner
    import mlflow
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.tracking import runstate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "fenced.yaml"
    path.write_text(yaml.safe_dump({"name": "fenced", "tracing": False, "strategies": [{"name": "recall_only"}],
                                    "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}]}))
    cfg = load_experiment(path)
    real, theirs = cell_run.run_cell, {}

    def taken_over_meanwhile(cell, *a, **k):  # while this holder is paused, another machine takes the cell
        client = mlflow.MlflowClient()
        name = runstate.claim_name("fenced", cell.config_hash)
        runstate.release(client.get_experiment_by_name(name).experiment_id, name)
        theirs["id"] = client.create_experiment(name, tags={"dkilab.host": "another-machine", "dkilab.pid": "1"})
        return real(cell, *a, **k)

    monkeypatch.setattr(cell_run, "run_cell", taken_over_meanwhile)
    lines = []
    [result] = runner.run_experiment(cfg, uri=uri, progress=False, echo=lines.append, claim=True)
    assert result.status == "failed" and result.error.startswith(runstate.CLAIM_LOST), result.error
    assert "now held by another-machine pid 1" in result.error and any("KILLED (" in ln for ln in lines), lines
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("fenced").experiment_id], "tags.`dkilab.kind` = 'cell'")
    assert [r.info.status for r in runs] == ["KILLED"]  # no FINISHED run of it from this holder
    held = client.get_experiment_by_name(runstate.claim_name("fenced", result.cell.config_hash))
    assert held is not None and held.experiment_id == theirs["id"]  # the new holder's claim is untouched
