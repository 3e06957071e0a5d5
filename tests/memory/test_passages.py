"""Messages over the encoder's window are indexed as passages that fit it (encoders/passages.py): a fact in the
last sentence of a 600-word message is found, where the message's own vector (the encoder's first 256 tokens)
never saw it."""
import warnings
from datetime import datetime, timezone

import numpy as np
import pytest
from dkilab.encoders import passages
from dkilab.encoders.embedder import Embedder
from dkilab.memory.store import MemoryStore
from dkilab.types import Message

FILLER = ["We spent the afternoon walking along the river and talking about the new bakery downtown.",
          "The weather was grey but mild, and the ducks seemed busier than usual near the old bridge.",
          "Later we argued about which film to watch and settled on an old comedy we both half remembered.",
          "My cousin called about the holiday plans and we went through the train times twice."]
FACT = "By the way, the code for my gym locker is 4721."
LONG = " ".join(FILLER[i % 4] for i in range(40)) + " " + FACT  # 600 words, the fact last
OTHERS = ["I went to the gym on Tuesday and did an hour on the bike.", "My locker at work sticks when it rains.",
          "The bakery downtown sells a very good rye bread.", "The train to my cousin's takes three hours."]
QUESTION = "What is the code for my gym locker?"
TS = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def embedder():
    return Embedder("offline:minilm")


def _messages(texts):
    return [Message(message_id=f"m{i}", user_id="u", session_id="s", turn_id=i, role="user", content=t, timestamp=TS,
                    speaker="Sam") for i, t in enumerate(texts)]


def test_a_fact_in_the_last_sentence_of_a_600_word_message_ranks_it_first(tmp_path, embedder):
    assert len(LONG.split()) >= 600 and embedder.count_tokens([LONG])[0] > 2 * embedder.window
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        store.add_messages(_messages([LONG] + OTHERS))
        stats = store.passage_stats()
        assert stats["over_window"] == 1 and stats["passages"] >= 3
        view = store.for_user("u")
        assert view.semantic_search(QUESTION, top_k=3).items[0].message.message_id == "m0"
        # a filtered search allows the passages of the messages it allows
        assert view.semantic_search(QUESTION, top_k=1, filter={"role": "user"}).items[0].message.message_id == "m0"
        # the message's own vector is the encoder's first window: the fact is not in it, and it ranks under the rest
        own = np.frombuffer(store.conn.execute("SELECT embedding FROM messages WHERE message_id='m0'").fetchone()[0],
                            np.float32)
        query = embedder.encode_query(QUESTION)
        cos = view.similarities(query, ["m0", "m1", "m2"])
        assert float(own @ query) < min(cos["m1"], cos["m2"]) < cos["m0"]
    with warnings.catch_warnings():  # reopened: the persisted index covers the passages, nothing is rebuilt
        warnings.simplefilter("error")
        with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
            assert store.for_user("u").semantic_search(QUESTION, top_k=1).items[0].message.message_id == "m0"
            assert store.vectors.rebuilt == []


def test_a_store_built_before_passages_gets_them_once(tmp_path, embedder):
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        store.add_messages(_messages([LONG] + OTHERS))
        store.for_user("u").semantic_search(QUESTION, top_k=1)  # its index persisted with the passages
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:  # as a store from before passages
        store.conn.execute("DELETE FROM passages")
        store.conn.execute("DELETE FROM meta WHERE key='passages'")
        store.conn.commit()
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        assert store.passage_stats()["passages"] == 0
        assert store.index_passages() == 1 and store.index_passages() == 0
        assert store.for_user("u").semantic_search(QUESTION, top_k=1).items[0].message.message_id == "m0"
        assert store.passage_stats()["over_window"] == 1
        cut = store.passage_stats()["passages"]
        store.conn.execute("UPDATE meta SET value='0' WHERE key='passages'")  # cut by another version
        zero = np.zeros(embedder.dim, np.float32).tobytes()
        store.conn.execute("UPDATE passages SET embedding=? WHERE idx=1", (zero,))
        store.conn.commit()
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        assert store.index_passages() == 1 and store.passage_stats()["passages"] == cut  # cut again, as this one does
        assert store.conn.execute("SELECT COUNT(*) FROM passages WHERE embedding=?", (zero,)).fetchone()[0] == 0
        assert store.for_user("u").semantic_search(QUESTION, top_k=1).items[0].message.message_id == "m0"


def test_a_short_message_has_no_passages_and_a_new_store_none_to_backfill(tmp_path, embedder):
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        store.add_messages(_messages(OTHERS))
        assert store.passage_stats() == {"messages": 4, "over_window": 0, "passages": 0}
        assert store.index_passages() == 0


ZH = "今天我们讨论了很多事情。" * 200 + "储物柜密码是4721。"


@pytest.mark.parametrize("model, text", [("offline:minilm", LONG), ("offline:e5", ZH),
                                         ("offline:minilm", ZH.replace("。", ""))])  # no sentence end: cut in halves
def test_every_passage_fits_the_window_and_together_they_keep_every_word(model, text):
    embedder = Embedder(model)
    cut = passages.of(embedder, "Sam", text, f"Sam: {text}")
    assert len(cut) >= 2 and all(p.startswith("Sam: ") for p in cut)
    assert max(embedder.count_tokens(cut)) <= embedder.window
    assert "".join(p[len("Sam: "):] for p in cut).replace(" ", "") == text.replace(" ", "")


def test_a_search_wider_than_the_store_gives_each_message_once_at_its_best_passage(tmp_path, embedder):
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        store.add_messages(_messages([LONG] + OTHERS))
        view = store.for_user("u")
        query = embedder.encode_query(QUESTION)
        hits = view.semantic_search(query_embedding=query, top_k=100).items
        assert sorted(h.message.message_id for h in hits) == [f"m{i}" for i in range(5)]
        best = view.similarities(query, [f"m{i}" for i in range(5)])
        assert all(abs(h.score - best[h.message.message_id]) < 1e-5 for h in hits)


def test_passages_off_cuts_at_the_window_as_before(tmp_path, embedder):
    with MemoryStore.open(tmp_path / "s", embedder=embedder, passages=False) as store:
        store.add_messages(_messages([LONG] + OTHERS))
        assert store.passage_stats()["passages"] == 0 and store.index_passages() == 0
        assert store.for_user("u").semantic_search(QUESTION, top_k=1).items[0].message.message_id != "m0"


SCATTERED = ("The zeppelin museum was closed for repairs. " + " ".join(FILLER[i % 4] for i in range(38))
             + " The ride home was long.")  # both words, far apart, in a message shorter than LONG_RIDE
LONG_RIDE = " ".join(FILLER[i % 4] for i in range(40)) + " We took a zeppelin ride over the lake."


@pytest.mark.parametrize("on", [True, False])
def test_bm25_scores_a_long_message_by_its_best_passage(tmp_path, embedder, on):
    with MemoryStore.open(tmp_path / "s", embedder=embedder, passages=on) as store:
        store.add_messages(_messages([SCATTERED, LONG_RIDE] + OTHERS))
        hits = store.for_user("u").lexical_search("zeppelin ride", page_size=10).items
        # as whole documents the shorter message wins; its words are in different passages, LONG_RIDE's in one
        assert [h.message.message_id for h in hits] == (["m1", "m0"] if on else ["m0", "m1"])
        assert store.for_user("u").lexical_search("zeppelin ride", filter={"role": "user"}).items[0].message \
            .message_id == hits[0].message.message_id  # a filtered search reads the passages too
        docs = store.conn.execute("SELECT COUNT(*) FROM passage_fts").fetchone()[0]
        assert docs == store.passage_stats()["passages"] and (docs > 0) == on


def test_a_recut_store_replaces_its_passage_documents(tmp_path, embedder):
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        store.add_messages(_messages([LONG, SCATTERED, LONG_RIDE] + OTHERS))
        before = [(h.message.message_id, h.score) for h in store.for_user("u").lexical_search("zeppelin ride").items]
        store.conn.execute("UPDATE meta SET value='0' WHERE key='passages'")  # cut by another version
        store.conn.commit()
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        assert store.index_passages() == 3
        after = [(h.message.message_id, h.score) for h in store.for_user("u").lexical_search("zeppelin ride").items]
        # the old passages' documents are gone (else BM25's document count, and every score, would change)
        assert [m for m, _ in after] == [m for m, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before], rel=1e-9)
        assert store.conn.execute("SELECT COUNT(*) FROM passage_fts").fetchone()[0] == store.passage_stats()["passages"]
        store.add_messages(_messages([LONG, SCATTERED, LONG_RIDE] + OTHERS + ["A zeppelin ride, once."])[-1:])
        assert store.for_user("u").lexical_search("zeppelin ride").items[0].message.message_id == "m7"
