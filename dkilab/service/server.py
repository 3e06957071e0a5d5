"""`dkilab serve`: open the store and the keys file, then run the app under uvicorn until stopped."""
from __future__ import annotations

import ipaddress


def serve(store_path: str, keys_path: str, host: str = "127.0.0.1", port: int = 8765, ready=None) -> None:
    """Serve `store_path` to the holders of the keys in `keys_path`. Refuses to start (ConfigError) on a
    missing store, a malformed or empty keys file; binds loopback unless told otherwise."""
    from pathlib import Path

    import uvicorn

    from dkilab.config import ConfigError
    from dkilab.memory import MemoryStore
    from dkilab.service.app import create_app
    from dkilab.service.keys import KeyRing

    ring = KeyRing.from_file(keys_path)  # re-read when the file changes: added and revoked keys act at once
    if not len(ring):
        raise ConfigError(f"keys file {keys_path} holds no keys: nobody could call the service "
                          f"(add one: dkilab keys add USER --keys {keys_path})")
    if not Path(store_path).exists():
        raise ConfigError(f"store {store_path} does not exist (build one: dkilab ingest DATASET --store PATH)")
    _one_thread_per_query()
    import sys

    # store work runs in worker threads (one tenant cannot stall the event loop); hand the GIL over every
    # 0.5 ms instead of 5 ms, or a worker waits up to 5 ms for the loop thread on every request
    sys.setswitchinterval(0.0005)
    store = MemoryStore.open(store_path)
    try:
        store.embedder.encode_query("warm up")  # load the encoder now, not on the first semantic query
        if not _loopback(host):
            print(f"warning: serving on {host}, reachable from other machines; keys travel in clear over plain HTTP "
                  "(put a TLS proxy in front)")
        config = uvicorn.Config(create_app(store, ring), host=host, port=port, log_level="warning",
                                access_log=False, timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        print(f"dkilab recall service: {store.path} ({store.count()} messages) for {len(ring)} keys on "
              f"http://{host}:{port}  (API docs: http://{host}:{port}/docs)", flush=True)
        if ready is not None:
            ready(server)
        server.run()
    finally:
        store.close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _one_thread_per_query() -> None:
    """Concurrent requests are the parallelism: FAISS's OpenMP team and torch's intra-op threads, entered
    from several request threads at once, stalled semantic search for hundreds of ms (p95 210 ms at 8
    clients against 2 ms at p50, `dkilab bench serve`)."""
    import faiss

    faiss.omp_set_num_threads(1)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def free_port() -> int:
    """A free loopback TCP port (for tests and benchmarks)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(store_path, keys_path, port: int, timeout: float = 60.0):
    """`dkilab serve` in its own process on 127.0.0.1:`port`; returns the Popen once /health answers
    (RuntimeError with the server's output if it exits or does not answer in `timeout` s)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    dkilab = str(Path(sys.executable).parent / "dkilab")
    proc = subprocess.Popen([dkilab, "serve", "--store", str(store_path), "--keys", str(keys_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dkilab serve exited ({proc.returncode}): {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"dkilab serve did not answer on port {port} in {timeout:.0f} s")
