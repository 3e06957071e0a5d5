"""Cursor paging under concurrent inserts, user isolation (property-based), two-process appends."""
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from dkilab.memory import MemoryStore
from dkilab.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, random_unit

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = ["apple", "river", "猫咪", "火锅", "garden", "旅行", "piano", "雨天"]


def make(i, user, text, minutes):
    return Message(f"{user}-{i}", user, f"{user}-s{i % 3}", i, "user" if i % 2 else "assistant", text,
                   T0 + timedelta(minutes=minutes))


def test_paging_has_no_gaps_or_repeats_while_inserting(tmp_path):
    with MemoryStore.open(tmp_path / "s") as store:
        base = [make(i, "al", f"apple river note {i} " + "apple " * (i % 5), minutes=i * 10) for i in range(60)]
        store.add_messages(base, embeddings=random_unit(60))
        view = store.for_user("al")
        n = 1000
        for tool in ("lex", "list"):
            expected = [h.message_id for h in (view.lexical_search("apple river", page_size=200) if tool == "lex"
                                               else view.messages_list(page_size=1000)).items]
            assert len(expected) >= 60
            seen, cursor = [], None
            while True:
                page = (view.lexical_search("apple river", page_size=7, cursor=cursor) if tool == "lex"
                        else view.messages_list(page_size=7, cursor=cursor))
                seen += [h.message_id for h in page.items]
                # new matching messages arrive between pages, some older than the page boundary
                new = [make(n, "al", "apple apple apple river river newer", minutes=(n % 7) * 10)]
                n += 1
                store.add_messages(new, embeddings=random_unit(1, seed=n))
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert seen == expected, tool


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.lists(st.sampled_from(WORDS), min_size=1,
                                                                        max_size=4)),
                min_size=1, max_size=30))
def test_users_never_see_each_others_messages(tmp_path_factory, plan):
    with MemoryStore.open(tmp_path_factory.mktemp("iso")) as store:
        msgs = [Message(f"m{i}", user, f"{user}-s", i, "user", " ".join(words) + f" secret{user}",
                        T0 + timedelta(minutes=i))
                for i, (user, words) in enumerate(plan)]
        store.add_messages(msgs, embeddings=random_unit(len(msgs), seed=len(msgs)))
        owner = {m.message_id: m.user_id for m in msgs}
        for user in ["u1", "u2", "u3"]:
            view = store.for_user(user)
            mine = {m.message_id for m in msgs if m.user_id == user}
            got = set()
            for w in WORDS + ["secretu1", "secretu2", "secretu3", '"secretu1"']:
                got |= {h.message_id for h in view.lexical_search(w, page_size=200).items}
            got |= {h.message_id for h in view.semantic_search(query_embedding=random_unit(1, seed=7)[0],
                                                               top_k=50).items}
            got |= {h.message_id for h in view.messages_list(page_size=1000).items}
            assert got <= mine, {m: owner[m] for m in got - mine}
            assert {h.message_id for h in view.messages_list(page_size=1000).items} == mine
            for other in {"u1", "u2", "u3"} - {user}:
                assert view.lexical_search(f"secret{other}").items == []


WRITER = """
import sys, numpy as np
from datetime import datetime, timezone
from dkilab.memory import MemoryStore
from dkilab.types import Message
path, tag = sys.argv[1], sys.argv[2]
store = MemoryStore.open(path)
rng = np.random.default_rng(abs(hash(tag)) % 1000)
for b in range(20):
    msgs = [Message(f"{tag}-{b}-{i}", "shared", "s", b * 25 + i, "user", f"{tag} batch {b} item {i}",
                    datetime(2026, 1, 1, tzinfo=timezone.utc)) for i in range(25)]
    v = rng.standard_normal((25, 384)).astype("float32"); v /= np.linalg.norm(v, axis=1, keepdims=True)
    store.add_messages(msgs, embeddings=v, batch_size=5)
store.close()
"""


def test_two_processes_appending_lose_nothing(tmp_path):
    path = tmp_path / "shared"
    MemoryStore.open(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag], cwd=ROOT) for tag in ("p1", "p2")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with MemoryStore.open(path) as store:
        assert store.count() == 1000
        view = store.for_user("shared")
        assert len(view.lexical_search("p1", page_size=200).items) == 200  # capped page, more behind the cursor
        assert view.semantic_search(query_embedding=random_unit(1)[0], top_k=1000).items.__len__() == 1000
