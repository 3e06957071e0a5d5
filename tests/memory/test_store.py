import json
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.memory import MemoryStore, MessageNotFoundError
from dkilab.types import Message

from tests.conftest import random_unit

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def msg(mid, text, user="alice", session="s1", turn=1, role="user", minutes=0, **kw):
    return Message(mid, user, session, turn, role, text, T0 + timedelta(minutes=minutes), **kw)


CORPUS = [
    msg("a1", "我不吃辣，点菜的时候要提醒我", minutes=0),
    msg("a2", "好的，记住了您不吃辣", role="assistant", minutes=1),
    msg("a3", "I adopted a grey cat named Pixel from the shelter", session="s2", turn=1, minutes=60),
    msg("a4", "The cat is grey and very playful", session="s2", turn=1, role="assistant", minutes=61),
    msg("a5", "辣的东西我以前很喜欢，后来不吃了", session="s2", turn=2, minutes=62),
    msg("a6", "Next week I fly to Lisbon for a conference", session="s3", turn=1, minutes=2000),
    msg("b1", "Bob also loves grey cats and spicy food 不吃辣", user="bob", session="bs1", minutes=5),
]


@pytest.fixture
def filled(store):
    assert store.add_messages(CORPUS) == len(CORPUS)
    return store


def ids(page):
    return [h.message_id for h in page.items]


def test_add_is_idempotent_and_rejects_conflicting_ids(filled):
    assert filled.add_messages(CORPUS) == 0
    assert filled.count() == len(CORPUS)
    clash = msg("a1", "something else entirely")
    fresh = msg("a9", "a new message in the same batch")
    with pytest.raises(ValueError, match="'a1'"):
        filled.add_messages([fresh, clash])
    assert filled.count() == len(CORPUS)  # the whole batch was refused
    with pytest.raises(ValueError, match="twice"):
        filled.add_messages([fresh, fresh])


def test_chinese_and_english_lexical_search(filled):
    alice = filled.for_user("alice")
    assert set(ids(alice.lexical_search("不吃辣"))) >= {"a1", "a2"}
    hits = alice.lexical_search("Pixel shelter")
    assert ids(hits)[0] == "a3" and hits.items[0].score > 0
    assert ids(alice.lexical_search("Lisbon")) == ["a6"]
    # English keeps words and stems: "adopting" finds "adopted"
    assert ids(alice.lexical_search("adopting")) == ["a3"]


def test_phrase_search(filled):
    alice = filled.for_user("alice")
    assert set(ids(alice.lexical_search('"不吃辣"'))) == {"a1", "a2"}  # a5 has 不吃 and 辣 apart
    assert ids(alice.lexical_search('"grey cat"')) == ["a3"]  # a4 has "is grey", not "grey cat"
    assert ids(alice.lexical_search('"cat grey"')) == []
    assert set(ids(alice.lexical_search("“不吃辣”"))) == {"a1", "a2"}  # full-width quotes too


@pytest.mark.parametrize("query", ['NEAR(grey cat)', 'grey OR', 'body:cat', 'cat*', '"unbalanced', '^grey',
                                   'grey AND NOT cat', "it's", '""', '(((', 'ukey:x', '{body extra}: cat'])
def test_fts_syntax_in_user_text_is_never_executed(filled, query):
    page = filled.for_user("alice").lexical_search(query)
    assert all(h.user_id == "alice" for h in page.items)


def test_fts_operator_words_match_literally(store):
    store.add_messages([msg("x1", "NEAR the station"), msg("x2", "near or far")], embeddings=random_unit(2))
    assert set(ids(store.for_user("alice").lexical_search("NEAR"))) == {"x1", "x2"}


def test_empty_query_gives_empty_page(filled):
    alice = filled.for_user("alice")
    for q in ["", "   ", "\n\t"]:
        assert alice.lexical_search(q).items == [] and alice.lexical_search(q).next_cursor is None
        assert alice.semantic_search(q).items == []


def test_bad_arguments_give_clear_errors(filled):
    alice = filled.for_user("alice")
    with pytest.raises(ValueError, match="page_size"):
        alice.lexical_search("cat", page_size=0)
    with pytest.raises(ValueError, match="page_size"):
        alice.messages_list(page_size=10_000)
    with pytest.raises(ValueError, match="top_k"):
        alice.semantic_search("cat", top_k=0)
    with pytest.raises(ValueError, match="filter.colour"):
        alice.lexical_search("cat", filter={"colour": "grey"})
    with pytest.raises(ValueError, match="exactly one"):
        alice.semantic_search()
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        alice.semantic_search(query_embedding=[0.1, 0.2])


def test_unknown_and_foreign_message_ids(filled):
    alice = filled.for_user("alice")
    for mid in ["nope", "b1"]:  # b1 exists but belongs to bob
        with pytest.raises(MessageNotFoundError, match=repr(mid)) as err:
            alice.get(mid)
        assert isinstance(err.value, KeyError)
        with pytest.raises(KeyError):
            alice.neighbors(mid)


def test_cursor_errors(filled):
    alice, bob = filled.for_user("alice"), filled.for_user("bob")
    page = alice.lexical_search("cat grey 辣 不吃", page_size=1)
    assert page.next_cursor
    with pytest.raises(ValueError, match="different query"):
        alice.lexical_search("Lisbon", page_size=1, cursor=page.next_cursor)
    with pytest.raises(ValueError, match="different query"):
        bob.lexical_search("cat grey 辣 不吃", page_size=1, cursor=page.next_cursor)
    with pytest.raises(ValueError, match="different query"):
        alice.messages_list(page_size=1, cursor=page.next_cursor)
    token = page.next_cursor

    def changed(at: int, text: str) -> str:
        """`token` with `text` written at `at`, a letter shifted where it would equal what it replaces."""
        if token[at:at + len(text)] == text:  # a random IV sometimes holds the very letters
            text = "".join("y" if c != "y" else "z" for c in text)
        return token[:at] + text + token[at + len(text):]

    for garbled in ["garbage", changed(len(token) - 3, "abc"), changed(20, "x"), token[:-1] + "é", "x" * 5000]:
        assert garbled != token
        with pytest.raises(ValueError, match="garbled"):
            alice.lexical_search("cat grey 辣 不吃", page_size=1, cursor=garbled)
    with pytest.raises(TypeError, match="cursor"):
        alice.lexical_search("cat grey 辣 不吃", page_size=1, cursor=123)


def test_filters(filled):
    alice = filled.for_user("alice")
    assert ids(alice.lexical_search("不吃辣", filter={"role": "assistant"})) == ["a2"]
    assert set(ids(alice.lexical_search("不吃辣 grey", filter={"session_id": "s2"}))) == {"a3", "a4", "a5"}
    window = {"time_range": {"since": T0 + timedelta(minutes=30), "until": T0 + timedelta(minutes=1000)}}
    assert set(ids(alice.lexical_search("不吃辣 grey", filter=window))) == {"a3", "a4", "a5"}
    sem = alice.semantic_search("a trip abroad", filter={"session_id": "s3"}, top_k=5)
    assert ids(sem) == ["a6"]
    assert ids(alice.semantic_search("cats", filter={"role": "nobody"})) == []


def test_semantic_search(filled):
    alice = filled.for_user("alice")
    page = alice.semantic_search("my new kitten from the animal shelter", top_k=3)
    assert ids(page)[0] == "a3"
    assert -1 <= page.items[-1].score <= page.items[0].score <= 1  # cosine, best first
    assert all(h.score >= 0.3 for h in alice.semantic_search("kitten shelter", top_k=6, min_score=0.3).items)
    vec = filled.embedder.encode_query("my new kitten from the animal shelter")
    assert ids(alice.semantic_search(query_embedding=vec, top_k=3)) == ids(page)


def test_neighbors_stay_in_session_and_order(filled):
    alice = filled.for_user("alice")
    assert [m.message_id for m in alice.neighbors("a4", before=5, after=5)] == ["a3", "a4", "a5"]
    assert [m.message_id for m in alice.neighbors("a3", before=0, after=1)] == ["a3", "a4"]


def test_reopen_gives_identical_results(embedder, tmp_path):
    path = tmp_path / "persist"
    queries = ["grey cat", "不吃辣", "Lisbon conference"]
    with MemoryStore.open(path, embedder=embedder) as s:
        s.add_messages(CORPUS)
        u = s.for_user("alice")
        before = [[(h.message_id, round(h.score, 5)) for h in u.lexical_search(q).items] for q in queries]
        before_sem = [[(h.message_id, round(h.score, 5)) for h in u.semantic_search(q).items] for q in queries]
        before_list = ids(u.messages_list())
    assert (path / "memory.sqlite").exists() and list((path / "faiss").glob("*.faiss"))
    with MemoryStore.open(path, embedder=embedder) as s:
        u = s.for_user("alice")
        assert [[(h.message_id, round(h.score, 5)) for h in u.lexical_search(q).items] for q in queries] == before
        assert [[(h.message_id, round(h.score, 5)) for h in u.semantic_search(q).items] for q in queries] == before_sem
        assert ids(u.messages_list()) == before_list
        assert s.add_messages(CORPUS) == 0


def test_store_refuses_other_embedding_size(tmp_path):
    with MemoryStore.open(tmp_path / "s") as s:
        s.add_messages([msg("z1", "hello")], embeddings=random_unit(1, dim=16))
        with pytest.raises(ValueError, match="16-d"):
            s.add_messages([msg("z2", "world")], embeddings=random_unit(1, dim=8))


def test_other_users_data_never_changes_my_lexical_scores(filled):
    """BM25 statistics are per user: flooding another user with the same words leaves mine alone."""
    alice = filled.for_user("alice")
    before = [(h.message_id, h.score) for h in alice.lexical_search("grey cat Lisbon").items]
    filled.add_messages([msg(f"m{i}", f"grey cat number {i} flies to Lisbon", user="mallory", session="ms")
                         for i in range(40)], embeddings=random_unit(40))
    after = [(h.message_id, h.score) for h in alice.lexical_search("grey cat Lisbon").items]
    assert after == before and before


@pytest.mark.parametrize("version", ["2", "3"])
def test_a_store_of_an_older_schema_is_refused_untouched(embedder, tmp_path, version):
    """Stores of schemas 2 and 3 are not migrated any more: one line names the file and the migration note,
    and the file is left byte for byte as it was."""
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as s:
        s.add_messages(CORPUS, embeddings=random_unit(len(CORPUS)))
        s.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (version,))
        s.conn.commit()
    db = tmp_path / "s" / "memory.sqlite"
    before = db.read_bytes()
    with pytest.raises(ValueError, match=rf"memory.sqlite: schema version {version}, expected 4; docs/migration.md"):
        MemoryStore.open(tmp_path / "s", embedder=embedder)
    assert db.read_bytes() == before


def test_a_reply_is_found_through_the_turn_it_answers(embedder, tmp_path):
    """Index text v2: a message's vector also covers the previous turn of its session, so a bare reply
    is found by what it replies to, whether that turn came in the same batch or was stored earlier."""
    store = MemoryStore.open(tmp_path / "v2", embedder=embedder, index_text="2")
    store.add_messages([msg("q1", "Did you finally go to the pottery class you signed up for?", role="assistant"),
                        msg("r1", "Yes, yesterday! I loved it.", turn=2)])
    store.add_messages([msg("q2", "How was the marathon in Berlin last Sunday?", session="s9", role="assistant"),
                        msg("d1", "I loved the new cafe near work.", session="s8")])
    store.add_messages([msg("r2", "Exhausting, but I finished it!", session="s9", turn=2)])  # its question is stored
    alice = store.for_user("alice")
    replies = [h.message_id for h in alice.semantic_search("pottery class", top_k=4).items if h.message_id != "q1"]
    assert replies[0] == "r1"
    replies = [h.message_id for h in alice.semantic_search("Berlin marathon", top_k=4).items if h.message_id != "q2"]
    assert replies[0] == "r2"
    assert store._meta["index_text"] == "2"
    store.close()


def test_a_new_store_embeds_each_turn_with_the_one_it_replies_to_unless_asked_otherwise(store):
    """Every encoder's new store embeds each turn with the one it replies to (`embedder.index_text_for`: the
    held-out figures chose it for MiniLM too); `with_previous_turn: false` builds one of each turn alone, and
    an experiment's cells record what they resolved to."""
    from dkilab.encoders.embedder import index_text_for
    from dkilab.eval.harness.experiment import EmbedderSpec

    store.add_messages([msg("q1", "Where did you go?", role="assistant"), msg("r1", "To Lisbon.", turn=2)])
    assert store._meta["index_text"] == "2"
    assert {index_text_for(e) for e in ("offline:minilm", "offline:minilm-int8", "offline:minilm-locomo",
                                        "offline:e5", "some/hub-model")} == {"2"}
    en, zh = EmbedderSpec().for_language("en"), EmbedderSpec().for_language("zh")
    assert (en.index_text, zh.index_text) == ("2", "2")
    assert "with_previous_turn" not in en.identity() and "with_previous_turn" not in zh.identity()
    alone = EmbedderSpec(with_previous_turn=False, english="offline:minilm").for_language("en")
    assert alone.index_text == "1" and alone.identity()["with_previous_turn"] is False
    # stock MiniLM with the turn before: the identity cells had before the knob existed (their hashes do not move)
    assert EmbedderSpec(english="offline:minilm").for_language("en").identity() == {"model": "offline:minilm",
                                                                                    "batch_size": 64}


def test_a_store_embedded_before_index_text_versions_keeps_v1(embedder, tmp_path):
    from dkilab.memory.store import index_text

    with MemoryStore.open(tmp_path / "s", embedder=embedder) as s:
        s.add_messages([msg("q1", "Did you go to the pottery class?", role="assistant")])
        s.conn.execute("DELETE FROM meta WHERE key='index_text'")
        s.conn.commit()
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as s:
        s.add_messages([msg("r1", "Yes, yesterday!", turn=2)])
        assert s._meta["index_text"] == "1"
        hit = s.for_user("alice").semantic_search(
            query_embedding=embedder.encode([index_text(msg("r1", "Yes, yesterday!", turn=2), version="1")])[0],
            top_k=1)
        assert hit.items[0].message_id == "r1" and hit.items[0].score > 0.999


def test_a_store_remembers_its_embedder_and_refuses_another(tmp_path):
    """MiniLM and e5-small are both 384-d: the dimension alone cannot tell their vectors apart."""
    from dkilab.memory import Embedder, MemoryStore
    from dkilab.types import Message

    store = MemoryStore.open(tmp_path / "s", embedder=Embedder("offline:e5"))
    store.add_messages([Message(user_id="u", session_id="s", message_id="m1", role="user", content="我的猫叫咪咪",
                                timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc), turn_id=0),
                        Message(user_id="u", session_id="s", message_id="m2", role="user", content="明天去北京出差",
                                timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc), turn_id=1)])
    store.flush()
    store.close()
    again = MemoryStore.open(tmp_path / "s")  # no embedder given: the one that built it
    assert again.embedder.model_name == "offline:e5"
    hits = again.for_user("u").semantic_search("猫叫什么名字", top_k=1)
    assert [h.message_id for h in hits.items] == ["m1"]
    again.close()
    with pytest.raises(ValueError, match=r"built with the embedder 'offline:e5'.*'offline:minilm'"):
        MemoryStore.open(tmp_path / "s", embedder=Embedder("offline:minilm"))
    assert MemoryStore.open(tmp_path / "s").count() == 2  # nothing lost by the refusal


def test_e5_embeds_queries_and_passages_with_their_prefixes():
    import numpy as np
    from dkilab.memory import Embedder

    e = Embedder("offline:e5")
    doc = e.encode(["我的猫叫咪咪，是灰色的", "明天去北京出差"])
    assert doc.shape == (2, 384) and np.allclose(np.linalg.norm(doc, axis=1), 1, atol=1e-4)
    q = e.encode_query("猫的名字是什么")
    assert not np.allclose(q, e.encode(["猫的名字是什么"])[0])  # "query: " vs "passage: "
    assert int(np.argmax(doc @ q)) == 0


def test_metadata_filter_keeps_matching_messages_in_both_searches(store):
    docs = [msg("k1", "押品审批需要提交评估报告", user="kb", metadata={"domain": "system", "object": "押品"}),
            msg("k2", "客户审批需要提交评估报告", user="kb", metadata={"domain": "system", "object": "客户"}),
            msg("k3", "押品审批的权限规定", user="kb", metadata={"domain": "policy", "object": "押品"}),
            msg("k4", "审批 没有元数据", user="kb")]
    store.add_messages(docs)
    kb = store.for_user("kb")
    assert set(ids(kb.lexical_search("审批", page_size=10))) == {"k1", "k2", "k3", "k4"}
    assert set(ids(kb.lexical_search("审批", filter={"metadata": {"object": "押品"}}))) == {"k1", "k3"}
    both = {"metadata": {"object": "押品", "domain": ["system", "risk"]}}
    assert ids(kb.lexical_search("审批", filter=both)) == ["k1"]
    assert ids(kb.semantic_search("审批", filter=both, top_k=10)) == ["k1"]
    assert ids(kb.lexical_search("审批", filter={"metadata": {"object": "押品"}, "role": "assistant"})) == []
    # keys go into a JSON path: anything but an identifier is refused, by name
    for bad in ["object') OR 1=1 --", "a.b", ""]:
        with pytest.raises(ValueError, match="metadata key"):
            kb.lexical_search("审批", filter={"metadata": {bad: "押品"}})
    with pytest.raises(ValueError, match="empty list"):
        kb.semantic_search("审批", filter={"metadata": {"object": []}})


def test_the_default_minilm_is_an_onnx_build_with_the_pytorch_models_numbers():
    """offline:minilm runs an fp32 ONNX build of the same weights (onnxruntime): its vectors are the
    sentence-transformers model's (offline:minilm-torch), so stores and rankings do not move."""

    from dkilab.memory import Embedder

    texts = ["I adopted a grey cat called Pixel last Saturday.", "Short.", "我们五月份去了里斯本开会。",
             "The vet appointment is on Thursday at 4:30, and afterwards we might go for a walk by the river."]
    onnx, torch = Embedder("offline:minilm"), Embedder("offline:minilm-torch")
    assert type(onnx.model).__name__ == "OnnxEncoder" and type(torch.model).__name__ == "SentenceTransformer"
    a, b = onnx.encode(texts), torch.encode(texts)
    assert a.shape == b.shape == (4, 384) and float((a * b).sum(1).min()) > 0.99999
    assert float(onnx.encode_query("cat") @ torch.encode_query("cat")) > 0.99999


def test_the_int8_minilm_build_ranks_like_fp32_and_is_built_once(tmp_path, monkeypatch):
    """offline:minilm-int8: MiniLM's own weights as int8 ONNX (onnxruntime), built once into the cache.
    Its vectors are close to fp32's and rank the same on a small case; a store built with it refuses
    fp32 vectors (both 384-d). The ranking on LoCoMo is experiments/embedders_int8.yaml's job."""
    import numpy as np
    from dkilab.encoders import onnx_encoder
    from dkilab.memory import Embedder, MemoryStore

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    texts = ["I adopted a grey cat called Pixel last Saturday.", "The vet appointment is on Thursday at 4:30.",
             "We drove to Lisbon for a conference in May.", "My sister works as a nurse in Porto."]
    fp32, int8 = Embedder("offline:minilm"), Embedder("offline:minilm-int8")
    a, b = fp32.encode(texts), int8.encode(texts)
    assert b.shape == (4, 384) and np.allclose(np.linalg.norm(b, axis=1), 1, atol=1e-4)
    assert float((a * b).sum(1).min()) > 0.9
    for q in ("what is my cat called?", "when is the vet?", "which city did we visit in May?",
              "what does my sister do?"):
        assert int(np.argmax(a @ fp32.encode_query(q))) == int(np.argmax(b @ int8.encode_query(q)))
    built = list((tmp_path / "cache" / "encoders").glob("*-int8-*"))
    assert len(built) == 1 and (built[0] / "model_int8.onnx").exists()
    calls = []
    monkeypatch.setattr("torch.onnx.export", lambda *x, **k: calls.append(1))
    source = json.loads((built[0] / "dkilab.json").read_text())["source"]
    assert onnx_encoder.build(source) == built[0] and calls == []  # reused, not exported again
    store = MemoryStore.open(tmp_path / "s", embedder=int8)
    store.add_messages([Message(user_id="u", session_id="s", message_id="m1", role="user", content=texts[0],
                                timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc), turn_id=0)])
    store.close()
    with pytest.raises(ValueError, match=r"built with the embedder 'offline:minilm-int8'.*'offline:minilm'"):
        MemoryStore.open(tmp_path / "s", embedder=fp32)


def test_a_store_can_embed_each_turn_alone_and_keeps_to_its_choice(embedder, tmp_path):
    """EmbedderSpec.with_previous_turn: false = index text v1 (the turn alone, half the tokens to encode);
    a store keeps the version it was built with and refuses the other, by name."""
    from dkilab.memory.store import index_text

    m1, m2 = msg("q1", "Where did you go last week?", turn=0), msg("a1", "To Lisbon, for the conference.", turn=1)
    alone = MemoryStore.open(tmp_path / "v1", embedder=embedder, index_text="1")
    alone.add_messages([m1, m2])
    hit = alone.for_user("alice").semantic_search(query_embedding=embedder.encode([index_text(m2, version="1")])[0],
                                                  top_k=1)
    assert hit.items[0].message_id == "a1" and hit.items[0].score > 0.999  # embedded without the question
    alone.close()
    with pytest.raises(ValueError, match="embeds index text v1; it cannot take v2"):
        MemoryStore.open(tmp_path / "v1", embedder=embedder, index_text="2")
    assert MemoryStore.open(tmp_path / "v1", embedder=embedder).count() == 2  # opened as built
    with pytest.raises(ValueError, match="index_text '3'"):
        MemoryStore.open(tmp_path / "v3", embedder=embedder, index_text="3")


def test_a_vector_search_leaves_the_thread_count_of_generation_alone(store):
    """FAISS searches a user's small index on one OpenMP thread, then restores the calling thread's setting:
    torch shares that OpenMP, and a global 1 ran every later generation on one core."""
    import torch

    before = torch.get_num_threads()
    store.add_messages([msg("q1", "Where did you go?", role="assistant"), msg("r1", "To Lisbon.", turn=2)])
    assert store.for_user("alice").semantic_search("Lisbon", top_k=1).items[0].message_id == "r1"
    assert torch.get_num_threads() == before


def test_a_store_of_a_local_model_directory_is_keyed_by_its_weights(tmp_path):
    """Weights trained again into the same directory: the cached dataset store, the cell and the store itself
    all tell them from the old ones (the path alone would reuse vectors of the old model)."""
    import os

    from dkilab.eval.harness.experiment import EmbedderSpec
    from dkilab.eval.harness.stores import store_path
    from dkilab.memory import Embedder, MemoryStore
    from dkilab.types import Conversation

    model = tmp_path / "my-encoder"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "model.safetensors").write_bytes(b"old weights")
    old = Embedder(str(model)).weights
    assert old and Embedder("offline:minilm").weights is None  # the offline builds: their names fix their weights
    assert "weights" not in EmbedderSpec(model="offline:minilm").identity()
    cell_old = EmbedderSpec(model=str(model)).identity()
    assert cell_old["weights"] == old

    store = MemoryStore.open(tmp_path / "s", embedder=Embedder(str(model)))
    store.add_messages(CORPUS[:2], embeddings=random_unit(2))
    store.flush()
    store.close()
    MemoryStore.open(tmp_path / "s", embedder=Embedder(str(model))).close()  # same files: opens

    # same size, new bytes, mtime moved on: still told apart
    (model / "sub" / "model.safetensors").write_bytes(b"new weights")
    os.utime(model / "sub" / "model.safetensors", ns=(1, 1))
    new = Embedder(str(model)).weights
    assert new and new != old
    assert EmbedderSpec(model=str(model)).identity() != cell_old
    with pytest.raises(ValueError, match=rf"my-encoder with weights {old}.*now are {new}"):
        MemoryStore.open(tmp_path / "s", embedder=Embedder(str(model)))
    with pytest.raises(ValueError, match="weights"):  # opened without an embedder: the path's files now
        MemoryStore.open(tmp_path / "s")
    (model / "sub" / "model.safetensors").write_bytes(b"old weights")  # the old weights back: the store opens
    assert Embedder(str(model)).weights == old
    assert MemoryStore.open(tmp_path / "s").count() == 2  # nothing lost by the refusals

    conv = Conversation("c", "alice", CORPUS[:2])
    at_old = store_path([conv], "mine", Embedder(str(model)))
    (model / "sub" / "model.safetensors").write_bytes(b"new weights")
    assert store_path([conv], "mine", Embedder(str(model))) != at_old  # the cached dataset store too
    assert store_path([conv], "mine", Embedder("offline:minilm")) == store_path([conv], "mine",
                                                                                Embedder("offline:minilm"))
