"""The cursor result sets (`dkilab.memory.cursor.ResultSets`) and the strategies' K/V block cache: both
cachetools caches now (issue 31 item 5), with the eviction rules they had by hand."""

from dkilab.memory.cursor import ResultSets


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_per_user_limit_total_limit_and_ttl():
    clock = Clock()
    sets = ResultSets(per_user=2, total=3, ttl=10, timer=clock)
    sets.put("alice", "a1", 1)
    sets.put("alice", "a2", 2)
    sets.put("alice", "a3", 3)  # alice's oldest goes; nobody else is touched
    assert sets.get("alice", "a1") is None and sets.get("alice", "a3") == 3 and len(sets) == 2
    sets.put("bob", "b1", 4)
    sets.put("bob", "b2", 5)  # over the total: the least recently used set of anyone (alice's a2) goes, from both
    assert sets.get("alice", "a2") is None and len(sets) == 3
    sets.put("alice", "a4", 6)  # alice's cache forgot a2 when the total evicted it, so a3 stays hers until the
    # total evicts it
    assert sets.get("alice", "a3") is None and sets.get("bob", "b1") == 4 and sets.get("alice", "a4") == 6
    assert sets.get("bob", "a4") is None  # keyed by user: another user's cid is not found
    clock.t = 11
    assert sets.get("alice", "a4") is None and sets.get("bob", "b2") is None  # an hour (here 10 s) later: gone


def test_kv_blocks_are_bounded_in_bytes(monkeypatch):
    from dkilab.models import kv as kvmod
    from dkilab.strategies import create_strategy

    class Block:
        def __init__(self, n):
            self.nbytes = n

    encoded = []
    monkeypatch.setattr(kvmod, "encode_memory", lambda model, text: encoded.append(text) or Block(len(text) * 100))

    class M:
        supports_kv = True

    s = create_strategy("stable", {}, kv_cache_bytes=1000)
    model = M()
    s.memory_kv(model, "aaaa")  # 400 bytes
    s.memory_kv(model, "bbbb")  # 400
    assert s.memory_kv(model, "aaaa") is s.memory_kv(model, "aaaa") and encoded == ["aaaa", "bbbb"]
    s.memory_kv(model, "cccc")  # 1,200 > 1,000: the least recently used ("bbbb") goes
    s.memory_kv(model, "bbbb")
    assert encoded == ["aaaa", "bbbb", "cccc", "bbbb"]
    s.memory_kv(model, "x" * 20)  # 2,000 bytes: larger than the cap, used but not kept
    s.memory_kv(model, "x" * 20)
    assert encoded[-2:] == ["x" * 20] * 2
    s.release()
    s.memory_kv(model, "aaaa")
    assert encoded[-1] == "aaaa"


def test_threads_at_once_keep_both_limits():
    """The recall service's worker threads share one store: puts and gets from 8 threads at once raise
    nothing and leave both limits intact (each user's latest sets readable)."""
    from concurrent.futures import ThreadPoolExecutor

    sets = ResultSets(per_user=5, total=20, ttl=60)

    def work(u):
        for i in range(300):
            sets.put(f"u{u}", f"c{i}", i)
            sets.get(f"u{u}", f"c{i - 1}")
        return u

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))
    assert len(sets) <= 20
    assert all(len(mine) <= 5 for mine in sets._users.values())
