"""The retrieval peers (`peer_bm25`, `peer_engram`) as strategies: real rank-bm25 and engram-search over a
real store with the real MiniLM encoder; their rankings are scored like recall_only's, and their
indexes are never shared across users or stores."""
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.memory import MemoryStore
from dkilab.strategies import STRATEGIES
from dkilab.types import Message

T0 = datetime(2023, 5, 1, 10, tzinfo=timezone.utc)
TEXTS = ["I adopted a grey cat called Pixel.", "We went hiking on Mount Tam.", "My sister plays the cello.",
         "The bakery on Main Street closed.", "I started learning Portuguese.", "Our flight to Lisbon was delayed."]


def history(user: str, texts=TEXTS, day_step: int = 7) -> list[Message]:
    return [Message(f"m{i}", user, f"s{i // 2}", i, "user" if i % 2 == 0 else "assistant", t,
                    T0 + timedelta(days=day_step * i), speaker="Ana" if i % 2 == 0 else "Ben")
            for i, t in enumerate(texts)]


@pytest.fixture
def two_users(store):
    store.add_messages(history("alice"))
    store.add_messages(history("bob", ["Bob's only message is about cellos and a cello recital."]))
    return store


@pytest.mark.parametrize("name", ["peer_bm25", "peer_engram"])
def test_a_peer_ranks_the_message_that_answers_first_and_reports_sessions(two_users, name):
    peer = STRATEGIES[name]({"max_results": 4})
    a = peer.answer("What instrument does Ana's sister play? The cello?", two_users.for_user("alice"), None)
    assert a.recalled_ids[0] == "m2" and len(a.recalled_ids) == 4
    assert a.kind == "ranking" and a.metadata["recalled_sessions"][0] == "s1"
    assert a.latency_ms["recall"] > 0
    # bob's index holds only bob's message: never alice's, although the strategy object is shared
    b = peer.answer("What instrument does Ana's sister play? The cello?", two_users.for_user("bob"), None)
    assert b.recalled_ids == ["m0"]


def test_peer_indexes_are_keyed_by_store_and_user(embedder, tmp_path):
    peer = STRATEGIES["peer_bm25"]()
    one = MemoryStore.open(tmp_path / "one", embedder=embedder)
    two = MemoryStore.open(tmp_path / "two", embedder=embedder)
    try:
        one.add_messages(history("alice"))
        two.add_messages(history("alice", ["Nothing about music here.", "A cello was mentioned once.",
                                            "We cooked pasta.", "The train was late.", "It rained all day."]))
        assert peer.answer("cello", one.for_user("alice"), None).recalled_ids[0] == "m2"
        assert peer.answer("cello", two.for_user("alice"), None).recalled_ids[0] == "m1"
        # a message added later is in the next answer's index
        one.add_messages([Message("m9", "alice", "s9", 9, "user", "Another cello lesson today, a cello duet.",
                                  T0 + timedelta(days=90), speaker="Ana")])
        assert peer.answer("cello duet", one.for_user("alice"), None).recalled_ids[0] == "m9"
    finally:
        one.close()
        two.close()


def test_engram_uses_the_question_date_for_its_relative_dates(store):
    """engram-search's temporal boost: "two weeks ago" asked on day 37 favours the day-21 message."""
    texts = [f"Note {i}: we talked about plans." for i in range(6)]
    store.add_messages(history("alice", texts))
    peer = STRATEGIES["peer_engram"]()
    memory = store.for_user("alice")
    dated = peer.answer("What plans did we talk about 2 weeks ago?", memory, None, asked_at=T0 + timedelta(days=35))
    assert dated.recalled_ids[0] == "m3"  # day 21 = 35 - 14
    undated = peer.answer("What plans did we talk about 2 weeks ago?", memory, None)
    assert undated.recalled_ids != dated.recalled_ids


def test_a_peer_names_its_release_in_the_cell_identity():
    ident = STRATEGIES["peer_engram"]().identity()
    assert ident["peer"] == "engram-search 0.1.7"
    assert STRATEGIES["peer_bm25"]().identity()["peer"] == "rank-bm25 0.2.2"


def test_a_missing_peer_package_names_the_install_command(two_users, monkeypatch):
    import importlib

    real = importlib.import_module

    def without_rank_bm25(name, *a, **k):
        if name == "rank_bm25":
            raise ImportError("No module named 'rank_bm25'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", without_rank_bm25)
    with pytest.raises(ImportError, match=r"peer_bm25|rank-bm25==0\.2\.2: pip install 'dkilab\[peers\]'"):
        STRATEGIES["peer_bm25"]().answer("cello", two_users.for_user("alice"), None)
