import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs 2 workers on 2 cores: one thread each (before numpy
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # and torch load; subprocesses
        os.environ.setdefault(_var, "1")  # inherit it): pools of 2 threads per worker spin against each other

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent


# the slow suite's longest files (`make test-slow` prints its 25 slowest tests) go first: xdist's `load` scheduler
# hands tests out in order, so none of the 3-9 minute ones starts last while the other workers have gone idle
LONGEST_FIRST = ("tests/test_readme_figures.py", "tests/eval/tracking/test_team_server.py", "tests/test_notebooks.py",
                 "tests/eval/harness/test_ray_executor.py", "tests/gpu/test_gpu_command.py",
                 "tests/eval/harness/test_process_group.py",
                 "tests/memory/test_failover.py", "tests/eval/harness/test_claims.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        return next((i for i, path in enumerate(LONGEST_FIRST) if item.nodeid.startswith(path)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _data_dir_restored():
    """`--data-dir` sets $DKILAB_DATA_DIR for the process (the CLI's contract): no test leaves it to the next."""
    before = os.environ.get("DKILAB_DATA_DIR")
    yield
    if before is None:
        os.environ.pop("DKILAB_DATA_DIR", None)
    else:
        os.environ["DKILAB_DATA_DIR"] = before


@pytest.fixture(scope="session")
def embedder():
    """The real offline MiniLM embedder, loaded once per test session."""
    from dkilab.memory import Embedder

    emb = Embedder()
    emb.encode(["warm up"])
    return emb


@pytest.fixture
def store(embedder, tmp_path):
    from dkilab.memory import MemoryStore

    s = MemoryStore.open(tmp_path / "store", embedder=embedder)
    yield s
    s.close()


def random_unit(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(tmp_path: Path, workers: int = 1):
    """A real `mlflow server` on a free loopback port (SQLite backend, served artifacts) -> its URL."""
    import sys
    import urllib.request

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{tmp_path / 'server.db'}", "--serve-artifacts", "--artifacts-destination",
                             str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers)],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"))
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start: " + (tmp_path / "server.log").read_text()[-2000:])
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def redis_url():
    """A real redis-server on a free loopback port, started for this test session."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("DKILAB_REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed (scripts/install-redis.sh installs it)")
        pytest.skip("redis-server is not installed")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="dkilab-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def model():
    """The real offline SmolLM2-135M-Instruct (fp32 CPU), loaded once per test session."""
    from dkilab.models import load_model

    return load_model()
