"""The team tracking server: Debian's PostgreSQL started in its own data dir + `mlflow server` with served
artifacts. A CI config runs against its URL, resumes without duplicate cells, reads back through
`dkilab report`, and its traces and artifacts arrive; the data outlives a restart."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, _free_port

CONFIG = "experiments/ci/scripted_fact_calls.yaml"


def dkilab(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dkilab.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_runs_resume_and_report_against_the_postgres_backed_server():
    import mlflow
    from dkilab.eval.tracking.team_server import TeamServer, pg_bin

    pg_bin("initdb")  # a clear error (install scripts/install-postgres.sh) rather than a skip
    root = Path(tempfile.mkdtemp(prefix="dkilab-team-"))
    root.chmod(0o755)  # run as root, Postgres runs as the postgres user, who must get through
    try:
        server = TeamServer(root / "team", _free_port(), _free_port())
        with server:
            first = dkilab("run", CONFIG, "--tracking-uri", server.url)
            assert first.returncode == 0, first.stdout + first.stderr
            # a rerun finds both cells finished: asserted after the restart below, against the same data

            mlflow.set_tracking_uri(server.url)
            exp = mlflow.get_experiment_by_name("ci-scripted-fact-calls")
            assert exp.artifact_location.startswith("mlflow-artifacts:")  # clients need only the URL
            runs = mlflow.search_runs([exp.experiment_id], output_format="list")
            cells = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
            assert len(cells) == 2 and {r.info.status for r in cells} == {"FINISHED"}
            traces = mlflow.search_traces(locations=[exp.experiment_id], return_type="list")
            assert len(traces) == 8 and all("score" in {a.name for a in t.info.assessments} for t in traces)
            arts = {a.path for a in mlflow.MlflowClient().list_artifacts(cells[0].info.run_id)}
            assert {"predictions.jsonl", "questions.json"} <= arts
            assert list((root / "team" / "artifacts").rglob("predictions.jsonl"))  # stored by the server
            rep = dkilab("report", "ci-scripted-fact-calls", "--tracking-uri", server.url, "--allow-scripted",
                         "--format", "json")
            assert rep.returncode == 0, rep.stderr
            assert [c["cell"] for c in json.loads(rep.stdout)["cells"]] == ["recall_v4@scripted", "native@scripted"]
        assert server.mlflow.poll() is not None and not (root / "team" / "pgdata" / "postmaster.pid").exists()

        # a restart keeps everything, here as `dkilab tracking-server --backend-store-uri postgresql://...
        # --workers 4`: the database is someone else's (a managed one; here the same data dir started apart),
        # used, never started or stopped by dkilab
        import psutil
        from dkilab.eval.tracking.team_server import Postgres, _redacted

        db = Postgres(root / "team" / "pgdata", _free_port(), root / "team" / "external.log").start()
        try:
            with TeamServer(root / "team", _free_port(), backend_store_uri=db.uri, workers=4) as again:  # its artifacts
                assert again.postgres is None
                mlflow.set_tracking_uri(again.url)
                exp = mlflow.get_experiment_by_name("ci-scripted-fact-calls")
                assert len(mlflow.search_runs([exp.experiment_id], output_format="list")) == len(runs)
                resumed = dkilab("run", CONFIG, "--tracking-uri", again.url)
                assert resumed.returncode == 0 and resumed.stdout.count("finished before") == 2, resumed.stdout
                cmdline = " ".join(psutil.Process(again.mlflow.pid).cmdline())
                assert "--workers 4" in cmdline and db.uri in cmdline
                assert len(psutil.Process(again.mlflow.pid).children(recursive=True)) >= 4  # the worker processes
            assert db._running()  # stopping the MLflow server left the external database alone
        finally:
            db.stop()
        assert _redacted("postgresql://me:secret@db:5432/mlflow") == "postgresql://me:***@db:5432/mlflow"
    finally:
        mlflow.set_tracking_uri(None)
        shutil.rmtree(root, ignore_errors=True)


def test_a_missing_postgres_is_named(monkeypatch):
    from dkilab.config import ConfigError
    from dkilab.eval.tracking import team_server

    monkeypatch.setattr(team_server.shutil, "which", lambda name: None)
    monkeypatch.setattr(team_server.glob, "glob", lambda pattern: [])
    with pytest.raises(ConfigError, match="install Debian's postgresql"):
        team_server.pg_bin("initdb")


def test_a_data_dir_the_postgres_user_cannot_reach_is_named(tmp_path, monkeypatch):
    from dkilab.config import ConfigError
    from dkilab.eval.tracking import team_server

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    monkeypatch.setattr(team_server.os, "geteuid", lambda: 0)
    with pytest.raises(ConfigError, match=f"cannot reach .*{closed.name}.*chmod o\\+x"):
        team_server._check_reachable(closed / "team")


@pytest.mark.slow
def test_a_taken_port_fails_clearly_and_leaves_no_postgres_running():
    import socket

    from dkilab.config import ConfigError
    from dkilab.eval.tracking.team_server import TeamServer

    root = Path(tempfile.mkdtemp(prefix="dkilab-team-"))
    root.chmod(0o755)
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = TeamServer(root / "team", taken.getsockname()[1], _free_port())
            with pytest.raises(ConfigError, match="mlflow server (exited|did not answer)"):
                server.start(timeout=60)
        assert not (root / "team" / "pgdata" / "postmaster.pid").exists()  # Postgres was stopped again
    finally:
        shutil.rmtree(root, ignore_errors=True)
