"""The team tracking server (`dkilab tracking-server`): `mlflow server` on a PostgreSQL backend store with
a local artifact root served by the server (`--serve-artifacts`), so researchers need only its URL
(`MLFLOW_TRACKING_URI=http://host:port`).

Postgres is Debian's, started by this command in its own data dir (`<dir>/pgdata`, `initdb` on first
use), listening on loopback only with a socket in `<dir>`; the MLflow server is its only client. Run as
root (a container), the Postgres processes run as the `postgres` user (Postgres refuses root). Stopping
(Ctrl-C, SIGTERM, or an error while starting) stops the MLflow server and then Postgres ("fast" mode:
open transactions are rolled back, nothing committed is lost).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dkilab.config import ConfigError
from dkilab.eval.tracking.ui import stop_group

DB_NAME = DB_USER = "mlflow"


def pg_bin(name: str) -> str:
    """A Postgres program: on PATH, else in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise ConfigError(f"PostgreSQL's {name} is not installed: install Debian's postgresql package "
                          "(scripts/install-postgres.sh)")
    return found


def _as_postgres(cmd: list[str]) -> list[str]:
    """Postgres refuses to run as root: as root, run it as the `postgres` user."""
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ConfigError("running as root without `runuser`: start the tracking server as an ordinary user")
    return [runuser, "-u", "postgres", "--", *cmd]


def _owned_by_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def _check_reachable(path: Path) -> None:
    """As root, Postgres runs as `postgres`: every directory above its data dir must let it through."""
    if os.geteuid() != 0:
        return
    for parent in path.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise ConfigError(f"the postgres user cannot reach {path}: {parent} is closed to other users "
                              f"(chmod o+x {parent}, or pass a --dir elsewhere)")


@dataclass
class Postgres:
    data: Path
    port: int
    log: Path

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"

    def start(self) -> "Postgres":
        self.data.parent.mkdir(parents=True, exist_ok=True)
        _check_reachable(self.data.parent)
        _owned_by_postgres(self.data.parent)
        if not (self.data / "PG_VERSION").exists():
            self.data.mkdir(exist_ok=True)
            _owned_by_postgres(self.data)
            _run(_as_postgres([pg_bin("initdb"), "-D", str(self.data), "-U", DB_USER, "--auth=trust",
                               "--encoding=UTF8", "--locale=C"]), "initdb")
        if (self.data / "postmaster.pid").exists() and self._running():
            raise ConfigError(f"a Postgres server is already running on {self.data} (stop it first: "
                              f"pg_ctl -D {self.data} stop)")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data.parent}"
        _run(_as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "60",
                           "start"]), f"Postgres (log: {self.log})")
        exists = _run(_as_postgres([pg_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, "-d",
                                    "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname='{DB_NAME}'"]),
                      "psql").strip()
        if exists != "1":
            _run(_as_postgres([pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, DB_NAME]),
                 "createdb")
        return self

    def _running(self) -> bool:
        return subprocess.run(_as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "status"]),
                              capture_output=True).returncode == 0

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(_as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, timeout=120)


def _run(cmd: list[str], what: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
    if r.returncode != 0:
        raise ConfigError(f"{what} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-1500:]}")
    return r.stdout


@dataclass
class TeamServer:
    """Postgres + `mlflow server`; `start()` returns when both answer, `stop()` stops both."""
    dir: Path
    port: int = 5000
    pg_port: int = 5433
    host: str = "127.0.0.1"
    backend_store_uri: str | None = None  # an external (managed) PostgreSQL: no local one is started
    workers: int = 2  # the MLflow server's worker processes (more for a team or a cluster of runs)

    def __post_init__(self):
        self.dir = Path(self.dir).resolve()
        self.postgres = None if self.backend_store_uri else Postgres(self.dir / "pgdata", self.pg_port,
                                                                     self.dir / "postgres.log")
        self.mlflow: subprocess.Popen | None = None

    @property
    def backend(self) -> str:
        return self.backend_store_uri or self.postgres.uri

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 120.0) -> "TeamServer":
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.postgres is not None:
            self.postgres.start()
        try:
            artifacts = self.dir / "artifacts"
            artifacts.mkdir(exist_ok=True)
            log = open(self.dir / "mlflow-server.log", "a")
            self.mlflow = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
                 "--serve-artifacts", "--artifacts-destination", str(artifacts), "--host", self.host,
                 "--port", str(self.port), "--workers", str(self.workers)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.mlflow.poll() is not None:
                    raise ConfigError(f"mlflow server exited ({self.mlflow.returncode}); log: "
                                      f"{(self.dir / 'mlflow-server.log').read_text()[-1500:]}")
                try:
                    urllib.request.urlopen(self.url + "/health", timeout=2).read()
                    return self
                except OSError:
                    time.sleep(0.5)
            raise ConfigError(f"mlflow server did not answer on {self.url} in {timeout:.0f} s "
                              f"(log: {self.dir / 'mlflow-server.log'})")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.mlflow is not None:
            stop_group(self.mlflow, grace=30)  # the server and its gunicorn/uvicorn workers, as a group
        if self.postgres is not None:  # an external database is not ours to stop
            self.postgres.stop()

    def __enter__(self) -> "TeamServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(dir: str, port: int, pg_port: int, host: str, backend_store_uri: str | None = None, workers: int = 2) -> int:
    """Run until Ctrl-C or SIGTERM, then stop both servers (the MLflow server only, on an external database)."""
    server = TeamServer(Path(dir), port, pg_port, host, backend_store_uri, workers)
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    with server:
        where = (f"backend {_redacted(backend_store_uri)}" if backend_store_uri else
                 f"backend PostgreSQL on 127.0.0.1:{pg_port}, data {server.postgres.data}")
        print(f"MLflow tracking server: {server.url}  ({where}; {workers} workers; artifacts "
              f"{server.dir / 'artifacts'}, served by the server)\n"
              f"researchers: export MLFLOW_TRACKING_URI={server.url}   (Ctrl-C stops both servers)", flush=True)
        proc = server.mlflow
        assert proc is not None  # started by `with server`
        try:
            while not stop["now"] and proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        if proc.poll() is not None:
            print(f"mlflow server exited ({proc.returncode}); stopping Postgres", file=sys.stderr)
            return 1
    return 0


def _redacted(uri: str) -> str:
    """A database URI without its password (printed to a terminal a team shares)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", uri)
