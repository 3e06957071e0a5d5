"""A cell run makes no connection outside 127.0.0.1 (issue 85): every `dkilab run` used to contact MLflow's
telemetry host. The run here is a real `dkilab run` process with a socket guard loaded first (sitecustomize):
every connect and name lookup it attempts to a non-loopback address is written down, at exit too (the telemetry
client flushes from an atexit hook), and the run must have attempted none."""
import json
import os
import subprocess
import sys

import yaml

from tests.conftest import ROOT

GUARD = '''
import atexit, json, os, socket
_seen = []
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0", "/")  # "/": a Unix socket
def _check(host):
    host = "" if host is None else str(host)
    if host and not host.startswith(_LOCAL):
        _seen.append(host)
        raise OSError("outside connection refused by the test's guard: " + host)
_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
def connect(self, address):
    _check(address[0] if isinstance(address, tuple) else address)
    return _connect(self, address)
def connect_ex(self, address):
    _check(address[0] if isinstance(address, tuple) else address)
    return _connect_ex(self, address)
def getaddrinfo(host, *args, **kwargs):
    _check(host)
    return _getaddrinfo(host, *args, **kwargs)
socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
atexit.register(lambda: open(os.environ["GUARD_LOG"], "w").write(json.dumps(_seen)))
'''


def test_a_run_attempts_no_connection_outside_loopback(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(GUARD)
    script = tmp_path / "s.yaml"
    script.write_text('default: "Paris"\n')
    config = tmp_path / "offline.yaml"
    config.write_text(yaml.safe_dump({"name": "offline", "model": {"spec": f"scripted:{script}"},
                                      "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}],
                                      "strategies": [{"name": "no_memory"}]}))
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK", "CI",
                                                            "HF_HUB_DISABLE_TELEMETRY", "PYTEST_CURRENT_TEST")}
    env |= {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "GUARD_LOG": str(tmp_path / "seen.json")}
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "run", str(config), "--tracking-uri",
                          f"sqlite:///{tmp_path / 'm.db'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == []
