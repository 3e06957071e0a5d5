"""How often two processes break each other without the two guards of stop 49, and with them:

1. two writers log one new dataset to one experiment at one moment, through a 2-worker `mlflow server`
   (SQLite): MLflow's SQL store checks, then inserts, so one insert can fail on the unique constraint.
   Without `runstate.on_conflict_retry` (tries=1) and with it (the default);
2. two torchrun processes broadcast 20 objects as a run's cells do, then exit: without leaving the gloo
   group, and leaving it (`dkilab.cli.leave_process_group`). Left to interpreter shutdown, a process can
   abort (SIGABRT, "terminate called without an active exception").

    python experiments/bench/concurrency.py [--rounds 40] [--runs 30]     # about 5 minutes
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from dkilab.eval.tracking.team_server import TeamServer
from dkilab.service.server import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import os
from dkilab.cli import leave_process_group
from dkilab.eval.harness.processes import broadcast, process_state

state = process_state()
for i in range(20):
    assert broadcast(state, {"cell": i, "text": "x" * 1000} if state.is_main_process else None)["cell"] == i
if os.environ.get("LEAVE") == "1":
    leave_process_group(True)
"""


def dataset_race(rounds: int, tries: int) -> int:
    """Rounds in which a writer failed."""
    import mlflow
    import pandas as pd
    from dkilab.eval.tracking.runstate import on_conflict_retry

    tmp = Path(tempfile.mkdtemp(prefix="dkilab-race-"))
    with TeamServer(tmp, port=free_port(), backend_store_uri=f"sqlite:///{tmp}/s.db", workers=2) as server:
        client = mlflow.MlflowClient(server.url)
        exp = client.create_experiment("race")
        failed = 0
        for i in range(rounds):
            runs = [client.create_run(exp).info.run_id for _ in range(2)]
            data = mlflow.data.from_pandas(pd.DataFrame({"q": [f"q{i}"], "gold": ["a"]}), name=f"d{i}", targets="gold")
            entity = mlflow.entities.DatasetInput(data._to_mlflow_entity(), tags=[])
            gate, errors = threading.Barrier(2), []

            def log(run_id):
                gate.wait()
                try:
                    on_conflict_retry(client.log_inputs, run_id, datasets=[entity], tries=tries)
                except Exception as e:  # noqa: BLE001 - counted
                    errors.append(e)

            threads = [threading.Thread(target=log, args=(r,)) for r in runs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            failed += bool(errors)
        return failed


def group_exit(runs: int, leave: bool) -> int:
    """torchrun runs that did not exit 0."""
    worker = Path(tempfile.mkdtemp(prefix="dkilab-group-")) / "worker.py"
    worker.write_text(WORKER)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = os.environ | {"PYTHONPATH": str(ROOT), "LEAVE": "1" if leave else "0"}
    return sum(subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(worker)],
                              capture_output=True, env=env, timeout=300).returncode != 0 for _ in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    print(f"1. one dataset logged by two writers at once, {a.rounds} rounds (2-worker mlflow server, SQLite):")
    print(f"   without on_conflict_retry: {dataset_race(a.rounds, 1)} rounds failed")
    print(f"   with on_conflict_retry:    {dataset_race(a.rounds, 4)} rounds failed")
    print(f"2. two torchrun processes broadcast 20 objects and exit, {a.runs} runs:")
    print(f"   group left to interpreter shutdown: {group_exit(a.runs, False)} runs aborted")
    print(f"   leave_process_group before exit:    {group_exit(a.runs, True)} runs aborted")


if __name__ == "__main__":
    main()
