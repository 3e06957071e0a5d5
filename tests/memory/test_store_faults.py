"""The store under races, partial writes and damaged files (issue 12): nothing lost, nothing leaked,
clear errors. Threads and processes write the same store; FAISS files are damaged on disk."""
import json
import multiprocessing as mp
import shutil
import threading
import warnings
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from dkilab.memory import MemoryStore
from dkilab.types import Message

from tests.conftest import random_unit

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def msg(mid, text, user="alice", session="s1", turn=1, minutes=0):
    return Message(mid, user, session, turn, "user", text, T0 + timedelta(minutes=minutes))


def batch(user, n=50, prefix="msg"):
    return [msg(f"{prefix}-{i}", f"{user} says thing number {i}", user, turn=i + 1, minutes=i) for i in range(n)]


def _add_in_process(path, user, n, seed, q):
    try:
        from dkilab.memory import MemoryStore

        with MemoryStore.open(path) as s:
            q.put((user, s.add_messages(batch(user, n), embeddings=random_unit(n, seed=seed))))
    except Exception as exc:  # reported to the parent, which fails the test
        q.put((user, repr(exc)))


def test_two_users_with_the_same_ids_at_once_lose_nothing_threads(store):
    out, errors = {}, []

    def add(user, seed):
        try:
            out[user] = store.add_messages(batch(user), embeddings=random_unit(50, seed=seed))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(u, i)) for i, u in enumerate(["alice", "bob"])]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and out == {"alice": 50, "bob": 50}
    for u in ("alice", "bob"):
        assert store.for_user(u).get("msg-7").content == f"{u} says thing number 7"
    assert store.count() == 100


def test_two_users_with_the_same_ids_at_once_lose_nothing_processes(tmp_path):
    path = str(tmp_path / "s")
    MemoryStore.open(path).close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_add_in_process, args=(path, u, 50, i, q)) for i, u in enumerate(["alice", "bob"])]
    [p.start() for p in procs]
    got = dict(q.get(timeout=120) for _ in procs)
    [p.join(timeout=60) for p in procs]
    assert got == {"alice": 50, "bob": 50}
    with MemoryStore.open(path) as s:
        assert s.count() == 100 and len(s.for_user("bob").messages_list(page_size=100).items) == 50


def test_a_concurrent_conflicting_write_raises_and_keeps_one_version(store):
    results = []

    def add(text, seed):
        try:
            results.append(store.add_messages([msg("m1", text)], embeddings=random_unit(1, seed=seed)))
        except ValueError as exc:
            results.append(exc)

    threads = [threading.Thread(target=add, args=(f"version {i}", i)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(r for r in results if isinstance(r, int)) == [1]
    errs = [r for r in results if isinstance(r, ValueError)]
    assert len(errs) == 3 and all("'m1'" in str(e) and "immutable" in str(e) for e in errs)
    assert store.count() == 1


def test_ids_are_per_user_and_the_error_names_only_your_own(store):
    store.add_messages([msg("x1", "alice's secret")], embeddings=random_unit(1))
    assert store.add_messages([msg("x1", "bob's own text", "bob")], embeddings=random_unit(1, seed=1)) == 1
    with pytest.raises(ValueError) as info:
        store.add_messages([msg("x1", "changed", "bob")], embeddings=random_unit(1, seed=2))
    assert "'bob'" in str(info.value) and "alice" not in str(info.value)


def test_a_call_is_all_or_nothing_across_internal_batches(store):
    store.add_messages([msg("m-700", "already here")], embeddings=random_unit(1))
    many = [msg(f"m-{i}", f"text {i}", turn=i, minutes=i) for i in range(701)]  # m-700 clashes, past the first batch
    with pytest.raises(ValueError, match="'m-700'.*nothing from this call was written"):
        store.add_messages(many, embeddings=random_unit(701), batch_size=512)
    assert store.count() == 1
    with pytest.raises(ValueError, match="701 messages but embeddings of shape"):
        store.add_messages(many[:701], embeddings=random_unit(700))
    with pytest.raises(ValueError, match="NaN"):
        store.add_messages([msg("n1", "x")], embeddings=np.full((1, 384), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="twice in one call"):
        store.add_messages([msg("d1", "a"), msg("d1", "a")], embeddings=random_unit(2))
    with pytest.raises(ValueError, match="lone surrogate"):
        store.add_messages([msg("s1", "bad \ud800 text")], embeddings=random_unit(1))
    assert store.count() == 1


# --- FAISS files are a cache: damaged, foreign or stale ones are rebuilt from SQLite ---------------
def _faiss_file(path):
    (f,) = (path / "faiss").glob("*.faiss")
    return f


@pytest.fixture
def persisted(embedder, tmp_path):
    path = tmp_path / "s"
    with MemoryStore.open(path, embedder=embedder) as s:
        s.add_messages(batch("alice", 20))
        expected = [h.message_id for h in s.for_user("alice").semantic_search("thing number 4", top_k=5).items]
    return path, expected


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "flipped"])
def test_a_damaged_index_is_rebuilt(persisted, embedder, damage):
    path, expected = persisted
    f = _faiss_file(path)
    data = f.read_bytes()
    f.write_bytes({"garbage": b"not a faiss index at all", "truncated": data[: len(data) // 2], "empty": b"",
                   "flipped": data[:-100] + bytes(b ^ 0xFF for b in data[-100:])}[damage])
    for _ in range(2):  # and it stays usable after the next flush
        with MemoryStore.open(path, embedder=embedder) as s, warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = [h.message_id for h in s.for_user("alice").semantic_search("thing number 4", top_k=5).items]
            assert got == expected
        rebuilt = [x for x in w if "rebuilding it from SQLite" in str(x.message)]
        assert len(rebuilt) == (1 if _ == 0 else 0)


def test_a_recreated_database_with_an_old_index_indexes_its_new_messages(persisted, embedder):
    path, _ = persisted
    (path / "memory.sqlite").unlink()
    for extra in ("-wal", "-shm"):
        (path / f"memory.sqlite{extra}").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="memory.sqlite is missing"):  # refused unless asked for (issue 28)
        MemoryStore.open(path, embedder=embedder)
    with MemoryStore.open(path, embedder=embedder, create=True) as s, pytest.warns(RuntimeWarning,
                                                                                   match="another store"):
        s.add_messages([msg("new-1", "I bought a red bicycle yesterday")])
        hits = s.for_user("alice").semantic_search("red bicycle", top_k=5).items
        assert [h.message_id for h in hits] == ["new-1"]


def test_a_restored_database_does_not_resurrect_vectors(embedder, tmp_path):
    path = tmp_path / "s"
    with MemoryStore.open(path, embedder=embedder) as s:
        s.add_messages(batch("alice", 5))
    shutil.copy(path / "memory.sqlite", tmp_path / "backup.sqlite")  # closed: the WAL is checkpointed
    with MemoryStore.open(path, embedder=embedder) as s:  # later: one more message, its vector persisted
        s.add_messages([msg("late", "my passport number is in the blue folder", turn=9, minutes=99)])
        assert s.for_user("alice").semantic_search("passport", top_k=1).items[0].message_id == "late"
    shutil.copy(tmp_path / "backup.sqlite", path / "memory.sqlite")  # restore the 5-message database
    with MemoryStore.open(path, embedder=embedder) as s, pytest.warns(RuntimeWarning, match="restored or edited"):
        s.add_messages([msg("other", "we talked about the weather", turn=7, minutes=50)])  # takes the late rowid
        hits = s.for_user("alice").semantic_search("passport", top_k=10).items
        assert "late" not in [h.message_id for h in hits] and all(h.score < 0.9 for h in hits)


# --- hostile and careless input: clear errors naming the argument, nothing accepted silently -------
@pytest.fixture
def two(store):
    store.add_messages(batch("alice", 30) + batch("bob", 30) + [msg("fw", "I love Apple pie", "alice", turn=99)],
                       embeddings=random_unit(61))
    return store.for_user("alice"), store.for_user("bob")


def test_one_users_queries_never_expire_anothers_cursor(two):
    from dkilab.memory.view import RESULT_SETS_PER_USER

    alice, bob = two
    kept = bob.lexical_search("thing number", page_size=1)
    for i in range(RESULT_SETS_PER_USER + 10):
        alice.lexical_search(f"thing number {i}", page_size=1)
    assert bob.lexical_search("thing number", page_size=1, cursor=kept.next_cursor).items
    first = alice.lexical_search("says", page_size=1)
    for i in range(RESULT_SETS_PER_USER):
        alice.lexical_search(f"says thing {i}", page_size=1)
    with pytest.raises(ValueError, match=f"latest {RESULT_SETS_PER_USER}"):
        alice.lexical_search("says", page_size=1, cursor=first.next_cursor)


def test_cursors_reveal_nothing(two):
    import base64

    alice, _ = two
    for cursor in (alice.messages_list(page_size=1).next_cursor, alice.lexical_search("thing",
                                                                                      page_size=1).next_cursor):
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        assert not any(word in raw for word in (b"snap", b'"rid"', b'"cid"', b'"sig"'))
        with pytest.raises(ValueError):  # not readable JSON under the base64
            json.loads(raw)


def test_bad_query_arguments_raise_errors_naming_them(two):
    alice, _ = two
    cases = [
        (lambda: alice.lexical_search("bad \ud800"), ValueError, "query_text.*surrogate"),
        (lambda: alice.lexical_search(123), TypeError, "query_text must be a string"),
        (lambda: alice.lexical_search("x" * 5000), ValueError, "query_text has 5000 characters"),
        (lambda: alice.semantic_search("x" * 5000), ValueError, "query_text has 5000 characters"),
        (lambda: alice.semantic_search("cat", min_score="x"), ValueError, "min_score"),
        (lambda: alice.semantic_search("cat", min_score=float("nan")), ValueError, "min_score"),
        (lambda: alice.messages_list(since="yesterday"), ValueError, "since"),
        (lambda: alice.recent(10**20), ValueError, "n must be"),
        (lambda: alice.recent(-1), ValueError, "n must be"),
        (lambda: alice.lexical_search("cat", filter={"role": ""}), ValueError, "filter.role"),
        (lambda: alice.messages_list(role=""), ValueError, "role"),
        (lambda: alice.semantic_search(query_embedding=random_unit(2)), ValueError, r"shape \(2, 384\)"),
        (lambda: alice.semantic_search(query_embedding=random_unit(1)[0] * 37), ValueError, "unit length"),
        (lambda: alice.semantic_search(query_embedding=np.full(384, np.nan)), ValueError, "NaN"),
        (lambda: alice.lexical_search("cat", page_size=1, cursor="é" * 40), ValueError, "garbled"),
        (lambda: alice.get("x" * 2000), ValueError, "message_id has 2000 characters"),
    ]
    for call, exc, pattern in cases:
        with pytest.raises(exc, match=pattern):
            call()
    assert len(alice.semantic_search(query_embedding=random_unit(1), top_k=3).items) == 3  # (1, 384) is fine


def test_fullwidth_text_matches_lexically(two):
    alice, _ = two
    assert [h.message_id for h in alice.lexical_search("Ａｐｐｌｅ").items] == ["fw"]
    assert [h.message_id for h in alice.lexical_search("apple").items] == ["fw"]


def test_hostile_fact_call_arguments_are_malformed_not_errors():
    from dkilab.recall import create_formatter
    from dkilab.types import FactRequest

    f = create_formatter("x", "en")
    calls = ["retrieve_fact(m1, " + "9" * 5000 + ")", 'retrieve_fact("m1", offset=' + "1" * 20 + ")",
             "retrieve_fact(" + "a," * 20000 + ")", "retrieve_fact(m1, -1)"]
    for text in calls:
        assert f.detect_fact_request(text) is None
    assert f.malformed_calls == len(calls)
    for kind in ("deepseek", "glm"):
        g = create_formatter("x", "en", kind=kind)
        call = g.format_fact_call(FactRequest("m1"))
        assert '"offset": 0' in call and g.detect_fact_request(call.replace('"offset": 0', '"offset": true')) is None
    ok = f.detect_fact_request('retrieve_fact("m1, and more", offset=2, limit=3)')
    assert (ok.trace_id, ok.offset, ok.limit) == ("m1, and more", 2, 3)


def test_the_concurrency_benchmark_loses_nothing():
    from dkilab.bench.concurrency import concurrency, open_time

    c = concurrency(writers=2, messages=200, readers=1)
    assert c["lost"] == 0 and c["reported_added"] == 400 and not c["write_errors"] and not c["read_errors"]
    assert open_time(users=30)["open_ms"] > 0


def test_one_embedder_serves_many_threads_at_once():
    """The store's threads share one embedder: concurrent encodes (fresh model, no warm-up) all succeed and
    give the same vectors as one thread would."""
    from dkilab.memory import Embedder

    emb, errors, out = Embedder(), [], {}

    def work(i):
        try:
            out[i] = emb.encode([f"thread {i} says something about cats and trains"] * 3)
            emb.encode_query(f"query {i % 3}")
        except Exception as exc:
            errors.append(repr(exc))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(out) == 8
    assert np.allclose(out[5], emb.encode(["thread 5 says something about cats and trains"] * 3), atol=1e-5)


def test_a_deleted_or_truncated_store_is_refused_unless_create(tmp_path):
    """Issue 28 item 10: a 0-byte or deleted memory.sqlite used to open as a new empty store."""
    path = tmp_path / "store"
    with MemoryStore.open(path) as s:  # a new directory is simply a new store
        s.add_messages(batch("alice", 5), embeddings=random_unit(5))
        s.for_user("alice").semantic_search(query_embedding=random_unit(1)[0])  # builds the FAISS index
    (path / "memory.sqlite").write_bytes(b"")  # truncated
    with pytest.raises(ValueError, match=r"memory\.sqlite is empty \(0 bytes\).*create=True"):
        MemoryStore.open(path)
    (path / "memory.sqlite").unlink()  # deleted, its FAISS index left behind
    with pytest.raises(ValueError, match=r"memory\.sqlite is missing but .* holds a store's other files \(faiss\)"):
        MemoryStore.open(path)
    with MemoryStore.open(path, create=True) as s:  # asked for: an empty store there
        assert s.count() == 0


def test_a_store_whose_meta_was_emptied_is_refused_not_searched_with_another_encoder(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path) as s:
        s.add_messages(batch("alice", 3), embeddings=random_unit(3))
        with s.conn:
            s.conn.execute("DELETE FROM meta")
    with pytest.raises(ValueError, match=r"meta table lost schema_version, store_id, cursor_secret, embedder, "
                                         r"embedding_dim while 3 messages are stored"):
        MemoryStore.open(path)


def test_close_on_a_full_disk_leaves_no_temp_file_and_closes_sqlite(tmp_path, monkeypatch):
    """Issue 28 item 11: the FAISS flush fails half-way (ENOSPC); close() raises it, removes the temp file and
    still closes SQLite; the next open rebuilds the index from SQLite."""
    import errno
    import pathlib
    import sqlite3

    path = tmp_path / "store"
    s = MemoryStore.open(path)
    s.add_messages(batch("alice", 5), embeddings=random_unit(5))
    s.for_user("alice").semantic_search(query_embedding=random_unit(1)[0])  # the index, not saved yet
    real = pathlib.Path.write_bytes

    def full_disk(self, data):
        real(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pathlib.Path, "write_bytes", full_disk)
    with pytest.raises(OSError, match="No space left"):
        s.close()
    monkeypatch.undo()
    assert not [p.name for p in path.rglob("*") if ".tmp" in p.name or ".jtmp" in p.name]
    with pytest.raises(sqlite3.ProgrammingError):
        s.conn.execute("SELECT 1")  # closed
    with MemoryStore.open(path) as again:
        assert again.count() == 5
