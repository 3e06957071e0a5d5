"""Redis going away and coming back mid-flow (issue 12, item 9), on a real redis-server that the test
stops and restarts: no session or L2 state is lost, nothing is half-written, Redis is used again."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import warnings

import pytest
from dkilab.memory import MemoryManager

from tests.conftest import _free_port


class RedisServer:
    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            if os.environ.get("DKILAB_REQUIRE_REDIS"):
                pytest.fail("redis-server is not installed (scripts/install-redis.sh installs it)")
            pytest.skip("redis-server is not installed")
        self.port, self.dir, self.proc = _free_port(), tempfile.mkdtemp(prefix="dkilab-redis-"), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        import redis

        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return client
            except redis.ConnectionError:
                time.sleep(0.025)
        pytest.fail("redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def kill(self):
        """kill -9: Redis loses everything (no persistence)."""
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def server():
    s = RedisServer()
    s.start()
    yield s
    if s.proc.poll() is None:
        s.stop()
    shutil.rmtree(s.dir, ignore_errors=True)


@pytest.mark.parametrize("clock", ["real", "injected"])  # the resync follows the sessions' clock
def test_a_redis_outage_loses_no_session_or_l2_and_redis_is_used_again(store, server, clock):
    start = time.time() - 3e7  # an injected clock months behind the real one
    kwargs = {"clock": lambda: start + time.monotonic()} if clock == "injected" else {}
    mm = MemoryManager(store, backend="redis", redis_url=server.url, ttl=600, retry_after=0.2, **kwargs)
    alice = mm.for_user("alice")
    sid = alice.create_session()
    alice.save_user_query(sid, content="押品怎么创建？")
    alice.update_l2_state(sid, "system_operation", {"business_object": "押品", "operation_stage": "创建"})
    alice.update_l2_state(sid, "system_operation", {"operation_stage": "入库"})
    server.stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert alice.get_or_create_session(sid) == sid  # the known session goes on
        state = alice.update_l2_state(sid, "system_operation", {"operation_stage": "创建"})
        assert state["operation_chain"][-1]["operation_stage"] == "入库"  # L2 kept: no step back
        assert alice.save_user_query(sid, content="那审批呢？") == 2
    assert mm.backend.name == "sqlite"
    assert sum("continuing on SQLite" in str(w.message) for w in caught) == 1
    client = server.start()
    time.sleep(0.3)
    with pytest.warns(RuntimeWarning, match="back"):
        alice.update_l2_state(sid, "system_operation", {"operation_stage": "审批"})
    assert mm.backend.name == "redis"
    assert client.exists(f"session:{sid}") and json.loads(client.get(f"l2_memory:{sid}"))["version"] == 4
    live = alice.get_l2_state(sid)
    assert live["operation_chain"][-1]["operation_stage"] == "审批" and live["version"] == 4
    assert [h["turn_id"] for h in alice.get_conversation_history(sid)] == [1, 2]


def test_strict_redis_failure_writes_nothing_so_a_retry_does_not_duplicate(store, server):
    import redis

    mm = MemoryManager(store, backend="redis", redis_url=server.url, strict=True, ttl=600)
    alice = mm.for_user("alice")
    sid = alice.create_session()
    alice.save_user_query(sid, content="first question")
    server.stop()
    with pytest.raises(redis.RedisError):
        alice.save_user_query(sid, content="second question")
    assert [h["content"] for h in alice.get_conversation_history(sid)] == ["first question"]  # nothing half-done
    server.start()
    # the server came back empty (no persistence): the session is gone, which strict mode reports
    mm2 = MemoryManager(store, backend="redis", redis_url=server.url, strict=True, ttl=600)
    sid2 = mm2.for_user("alice").create_session()
    assert mm2.for_user("alice").save_user_query(sid2, content="second question") == 1


def test_error_replies_such_as_out_of_memory_fall_back_too(store, server):
    mm = MemoryManager(store, backend="redis", redis_url=server.url, ttl=600, retry_after=60)
    alice = mm.for_user("alice")
    sid = alice.create_session()
    mm.backend.primary.client.config_set("maxmemory", "1")  # every write now answers OOM (a ResponseError)
    mm.backend.primary.client.config_set("maxmemory-policy", "noeviction")
    with pytest.warns(RuntimeWarning, match="ResponseError|OutOfMemoryError"):
        state = alice.update_l2_state(sid, "loan", {"business_object": "贷款"})
    assert state["version"] == 1 and mm.backend.name == "sqlite"
    assert alice.get_l2_state(sid)["operation_chain"][-1]["business_object"] == "贷款"
