"""`dkilab ui`: MLflow's UI on a local store, run like a server. A busy port is refused before anything
starts (exit 2); the address is printed once the UI answers; Ctrl-C or SIGTERM stops the whole process
group (`mlflow ui`, its uvicorn parent, workers and job runner), so nothing is left behind."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dkilab.config import ConfigError


def port_free(host: str, port: int) -> bool:
    """Nothing listens on host:port (a connection of a stopped server in TIME_WAIT does not count, as
    uvicorn binds with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def stop_group(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        try:  # the leader is gone; its workers may not be
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything of the group still there (a worker that ignored TERM)
    except (ProcessLookupError, PermissionError):
        pass


def serve(uri: str, host: str, port: int, log: Path, timeout: float = 180.0, echo=print) -> int:
    """Run `mlflow ui` on `uri` until Ctrl-C / SIGTERM or until it exits. -> exit code."""
    if not port_free(host, port):
        raise ConfigError(f"port {port} on {host} is in use (another UI or server?): pick another with --port")
    log.parent.mkdir(parents=True, exist_ok=True)
    stopping = {"now": False}

    def on_term(signum, frame):
        stopping["now"] = True

    old = signal.signal(signal.SIGTERM, on_term)
    url = f"http://{host}:{port}"
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host,
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        echo(f"starting the MLflow UI for {uri} (log: {log}) ...", flush=True)
        deadline = time.monotonic() + timeout
        while not stopping["now"]:
            if proc.poll() is not None:
                echo(f"mlflow ui exited ({proc.returncode}) before answering; log {log}:\n"
                     f"{log.read_text(errors='replace')[-1500:]}", file=sys.stderr)
                return 1
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    echo(f"mlflow ui did not answer on {url} in {timeout:.0f} s (log: {log})", file=sys.stderr)
                    return 1
                time.sleep(0.3)
        if stopping["now"]:
            return 0
        echo(f"MLflow UI for {uri} on {url}  (Ctrl-C stops it)", flush=True)
        while not stopping["now"] and proc.poll() is None:
            time.sleep(0.3)
        if proc.poll() is not None and not stopping["now"]:
            echo(f"mlflow ui exited ({proc.returncode}); log: {log}", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop_group(proc)
        signal.signal(signal.SIGTERM, old)
