"""`recall: {preset: seed}`: the recall stage as seed recall-v4 §2.2 and §6 state it."""
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.eval.harness.experiment import identity_params
from dkilab.memory import MemoryStore
from dkilab.recall import MultiSignalRecall, ReferenceResolver, validate_recall_config
from dkilab.recall.seed_ranking import SEED_POS
from dkilab.text.keywords import extract_keywords
from dkilab.types import Message

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_the_preset_is_the_seeds_values_and_keys_beside_it_override():
    seed = validate_recall_config({"preset": "seed"}).signals
    assert (seed.keyword_topk, seed.keyword_pos, seed.vector_top_k, seed.vector_threshold, seed.fusion) == (
        5, "seed", 10, 0.5, "seed")
    assert seed.speaker_focus == 0 and seed.prf_docs == 0 and seed.neighbor_expansion == 0
    moved = validate_recall_config({"preset": "seed", "signals": {"vector_threshold": 0.3}})
    assert moved.signals.vector_threshold == 0.3 and moved.signals.vector_top_k == 10
    # a dotted update (a sweep point) keeps the preset and moves one value
    assert moved.with_updates({"signals.keyword_topk": 3}).signals.fusion == "seed"
    with pytest.raises(ValueError, match="preset"):
        validate_recall_config({"preset": "paper"})
    # off by default: the defaults' cells keep their identities
    ident = identity_params(validate_recall_config({}))
    assert "preset" not in ident and "keyword_pos" not in ident["signals"]
    assert identity_params(validate_recall_config({"preset": "seed"}))["signals"]["keyword_pos"] == "seed"


def test_the_seeds_parts_of_speech_drop_numbers_and_latin_words_in_chinese():
    q = "我2023年买的iPhone手机是什么颜色？"
    ours = [k for k, _ in extract_keywords(q, 5)]
    seeds = [k for k, _ in extract_keywords(q, 5, allow_pos=SEED_POS)]
    assert {"2023", "iphone", "手机", "颜色"} <= set(ours) and seeds == ["颜色", "手机"]


def _store(tmp_path, embedder, texts):
    store = MemoryStore.open(tmp_path / "s", embedder=embedder)
    store.add_messages([Message(f"t{i}", "u", f"s{i // 40}", i, "user" if i % 2 == 0 else "assistant", text,
                                T0 + timedelta(minutes=i)) for i, text in enumerate(texts)])
    return store


def test_the_seed_ranking_is_keyword_weight_plus_cosine_over_the_threshold(embedder, tmp_path):
    store = _store(tmp_path, embedder, ["I adopted a grey cat named Luna last spring.", "What a lovely name!",
                                        "My sister lives in Porto and works at a bakery.", "Porto is beautiful.",
                                        "The weather was rainy all week."])
    try:
        msr = MultiSignalRecall(validate_recall_config({"preset": "seed"}), ReferenceResolver(), store.for_user("u"))
        res = msr.recall("What is the name of my cat?")
        top = res.ranked[0]
        assert top.message.message_id == "t0"
        assert top.score == pytest.approx(top.signals.get("keyword", 0) + top.signals.get("vector", 0))
        assert all(r.signals.get("vector", 1.0) >= 0.5 for r in res.ranked)  # the seed's threshold
        assert "t4" not in {r.message.message_id for r in res.ranked}  # no keyword, cosine under 0.5
        assert len(res.keywords) <= 5 and res.recent_turns_added == 0  # no session id: no recent supplement
        # with a session id, the seed's recent supplement (min 2 turns) comes first
        sess = msr.recall("What is the name of my cat?", session_id="s0")
        assert [m.message_id for m in sess.messages[:4]] == ["t1", "t2", "t3", "t4"]
    finally:
        store.close()


def test_the_reference_scope_is_the_keyword_range_without_a_session_id(embedder, tmp_path):
    """Seed §2.2.2: "最近" matches the keywords in the last 50 turns, "刚才" in the last 3, with no session id
    (every LoCoMo question): the scope resolves against the conversation's latest turns."""
    store = _store(tmp_path, embedder, [f"第{i}句：今天聊了天气和工作。" for i in range(140)])
    try:
        cfg = validate_recall_config({"preset": "seed", "signals": {"vector_enabled": False}})
        msr = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"))
        lately = msr.recall("我们最近聊的天气怎么样？", max_results=200)
        assert lately.reference_scope == "current_session" and lately.reference_hits == 100  # 50 turns
        assert {r.message.message_id for r in lately.ranked} == {f"t{i}" for i in range(40, 140)}
        just = msr.recall("你刚才说的天气是什么意思？", max_results=200)
        assert just.reference_scope == "last_1_3_turns" and just.reference_hits == 6  # 3 turns
        assert {r.message.message_id for r in just.ranked} == {f"t{i}" for i in range(134, 140)}
        anywhere = msr.recall("天气怎么样？", max_results=200)  # no reference: the whole memory
        assert anywhere.reference_hits == 0 and len(anywhere.ranked) == 140
    finally:
        store.close()


def test_the_scope_window_reaches_the_scopes_own_turns_without_a_session_id(embedder, tmp_path):
    """By default "最近" reaches the last 50 turns and "刚才" the last 3 with no session id (every LoCoMo
    question); `reference_window: recent` resolves against the last 10 messages."""
    store = _store(tmp_path, embedder, [f"第{i}句：今天聊了天气和工作。" for i in range(140)])
    try:
        base = {"signals": {"fusion": "weighted", "keyword_enabled": False, "vector_enabled": False}}
        msr = MultiSignalRecall(validate_recall_config(base), ReferenceResolver(), store.for_user("u"))
        lately = msr.recall("我们最近聊了些什么？", max_results=200)
        assert lately.reference_scope == "current_session" and lately.reference_hits == 100  # 50 turns
        assert {r.message.message_id for r in lately.ranked} == {f"t{i}" for i in range(40, 140)}
        just = msr.recall("你刚才说的是什么意思？")
        assert just.reference_scope == "last_1_3_turns" and just.reference_hits == 6  # 3 turns
        assert {r.message.message_id for r in just.ranked} == {f"t{i}" for i in range(134, 140)}
        base["signals"]["reference_window"] = "recent"
        recent = MultiSignalRecall(validate_recall_config(base), ReferenceResolver(), store.for_user("u"))
        assert recent.recall("我们最近聊了些什么？").reference_hits == 10
        assert identity_params(validate_recall_config({}))["signals"]["reference_window"] == "scope"
        assert identity_params(validate_recall_config(base))["signals"]["reference_window"] == "recent"
    finally:
        store.close()
