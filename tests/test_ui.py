"""`dkilab ui` behaves like a server (issue 34): a busy port is refused with exit 2 before anything
starts; the address is printed only once the UI answers; SIGTERM or Ctrl-C stops `mlflow ui` and every
process it started. Against a real `mlflow ui` on a SQLite store."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from dkilab.eval.tracking.ui import port_free

from tests.conftest import ROOT, _free_port


@pytest.fixture
def store(tmp_path):
    import sqlite3

    path = tmp_path / "mlflow.db"
    sqlite3.connect(path).close()  # an existing (empty) store: mlflow creates its tables on start
    return f"sqlite:///{path}"


def _ui(store, port, tmp_path):
    env = {**os.environ, "DKILAB_CACHE_DIR": str(tmp_path / "cache")}
    # SIGINT back to its default, as in a terminal: a test run started in the background of a non-interactive
    # shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    return subprocess.Popen([sys.executable, "-m", "dkilab.cli", "ui", "--tracking-uri", store, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_busy_port_is_refused_before_anything_starts(store, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t = time.monotonic()
        proc = _ui(store, port, tmp_path)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in err
    assert "MLflow UI for" not in out and time.monotonic() - t < 30


@pytest.mark.slow  # starts a real `mlflow ui` twice (about 20 s each on two cores)
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_the_address_comes_when_the_ui_answers_and_a_stop_leaves_nothing_behind(store, tmp_path, how):
    port = _free_port()
    proc = _ui(store, port, tmp_path)
    try:
        lines = []
        while True:  # read until the address line (or the process ends)
            line = proc.stdout.readline()
            assert line, f"dkilab ui ended early: {proc.stderr.read()}"
            lines.append(line)
            if line.startswith("MLflow UI for"):
                break
        # the address is printed only once the server answers
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
        assert lines[0].startswith("starting the MLflow UI")
        family = psutil.Process(proc.pid).children(recursive=True)
        assert family  # mlflow ui and what it started
        proc.send_signal(how)
        proc.wait(timeout=120)  # a stop waits up to 15 s for mlflow's workers, longer on a loaded machine
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (0 if how == signal.SIGTERM else 130)
    time.sleep(0.5)
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert port_free("127.0.0.1", port)  # nothing listens there any more: a new `dkilab ui` may start
