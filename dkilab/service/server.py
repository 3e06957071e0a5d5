"""`dkilab serve`: open the store and the keys file, then run the app under uvicorn until stopped."""
from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dkilab.config import ConfigError
from dkilab.memory import MemoryStore
from dkilab.service.keys import KeyRing

HEADER_TIMEOUT = 10.0  # s a connection may take to send a request's headers (a new one, or the next on keep-alive)
IDLE_TIMEOUT = 5  # s a kept-alive connection may sit idle between requests


def header_timeout_protocol(timeout: float = HEADER_TIMEOUT):
    """uvicorn's h11 protocol with a deadline on the request line and headers: uvicorn arms none, so a client
    that connects and sends half a header (or nothing) would hold a connection for ever (slowloris). Each
    request's headers must be complete within `timeout` s of the connection or of its first byte."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _header_task: Any = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._header_task = self.loop.call_later(timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_task is not None:
                self._header_task.cancel()
                self._header_task = None

        def _headers_late(self) -> None:
            self._header_task = None
            if self.conn.their_state == h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # the headers never came: drop the connection, no reply owed

        def data_received(self, data: bytes) -> None:
            if self._header_task is None and self.conn.their_state == h11.IDLE:
                self._arm()  # the next request on a kept-alive connection starts its own deadline
            super().data_received(data)
            if self.conn.their_state != h11.IDLE:
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


def uvicorn_config(app, host: str, port: int, header_timeout: float = HEADER_TIMEOUT, **kw):
    """The service's uvicorn settings: header and idle deadlines, no access log."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                          http=header_timeout_protocol(header_timeout), timeout_keep_alive=IDLE_TIMEOUT, **kw)


def serve(store_path: str, keys_path: str, host: str = "127.0.0.1", port: int = 8765, ready=None) -> None:
    """Serve `store_path` to the holders of the keys in `keys_path`. Refuses to start (ConfigError) on a
    missing store, a malformed or empty keys file; binds loopback unless told otherwise."""
    import uvicorn

    from dkilab.service.app import create_app

    ring = KeyRing.from_file(keys_path)  # re-read when the file changes: added and revoked keys act at once
    if not len(ring):
        raise ConfigError(f"keys file {keys_path} holds no keys: nobody could call the service "
                          f"(add one: dkilab keys add USER --keys {keys_path})")
    if not Path(store_path).exists():
        raise ConfigError(f"store {store_path} does not exist (build one: dkilab ingest DATASET --store PATH)")
    _one_thread_per_query()

    # store work runs in worker threads (one tenant cannot stall the event loop); hand the GIL over every
    # 0.5 ms instead of 5 ms, or a worker waits up to 5 ms for the loop thread on every request
    sys.setswitchinterval(0.0005)
    store = MemoryStore.open(store_path)
    try:
        store.embedder.encode_query("warm up")  # load the encoder now, not on the first semantic query
        if not _loopback(host):
            print(f"warning: serving on {host}, reachable from other machines; keys travel in clear over plain HTTP "
                  "(put a TLS proxy in front)")
        config = uvicorn_config(create_app(store, ring), host, port, timeout_graceful_shutdown=5)
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(store_path, keys_path, port: int, timeout: float = 60.0):
    """`dkilab serve` in its own process on 127.0.0.1:`port`; returns the Popen once /health answers
    (RuntimeError with the server's output if it exits or does not answer in `timeout` s)."""
    import httpx

    dkilab = str(Path(sys.executable).parent / "dkilab")
    proc = subprocess.Popen([dkilab, "serve", "--store", str(store_path), "--keys", str(keys_path), "--port",
                             str(port)],
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
