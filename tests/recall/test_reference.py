from datetime import datetime, timezone

import pytest
from dkilab.recall.reference import (
    ReferenceResolver,
    ReferenceResolverConfig,
    ReferenceScope,
    ReferenceType,
    create_reference_resolver,
)
from dkilab.types import Message

SORT_HISTORY = [
    {"role": "user", "content": "有什么好的排序算法？"},
    {"role": "assistant", "content": "推荐使用快速排序..."},
    {"role": "user", "content": "还有呢？"},
    {"role": "assistant", "content": "归并排序也不错..."},
]


def test_seed_example_1_temporal():
    r = ReferenceResolver().resolve("刚才你说的那个方案是什么？", SORT_HISTORY)
    assert (r.reference_type, r.scope, r.matched_keyword, r.recall_turns) == (
        ReferenceType.TEMPORAL, ReferenceScope.LAST_1_3_TURNS, "刚才", 3)
    assert r.resolved_content.startswith("用户: 有什么好的排序算法？\n助手: 推荐使用快速排序...")
    assert r.source_turns == [0, 1, 2, 3]


def test_seed_example_2_stance():
    history = [{"role": "assistant", "content": "我建议使用Redis作为缓存层"}, {"role": "user", "content": "好的"}]
    r = ReferenceResolver().resolve("之前你说的那个建议还有效吗？", history)
    assert (r.reference_type, r.scope, r.matched_keyword) == (ReferenceType.STANCE,
                                                              ReferenceScope.ASSISTANT_LAST_STANCE, "之前你说的")
    assert r.resolved_content == "我建议使用Redis作为缓存层"


@pytest.mark.parametrize("query,scope,kw", [
    ("刚刚那个链接呢", "last_1_3_turns", "刚刚"), ("最近我们聊了什么", "current_session", "最近"),
    ("那件事怎么样了", "last_shared_topic", "那件事"), ("那个问题解决了吗", "last_shared_topic", "那个问题"),
    ("回到那个话题", "last_shared_topic", "那个话题"), ("你之前提到的书", "assistant_last_stance", "你之前提到"),
    ("前几天的会议", "last_5_10_turns", "前几天"), ("上次的餐厅", "last_5_10_turns", "上次"),
    ("What did we discuss just now?", "last_1_3_turns", "just now"), ("I recently moved", "current_session",
                                                                      "recently"),
    ("What about that thing?", "last_shared_topic", "that thing"),
    ("Is what you said earlier still true?", "assistant_last_stance", "you said earlier"),
    ("Like last time, please", "last_5_10_turns", "last time"), ("I just asked you", "last_1_3_turns", "just"),
])
def test_every_seed_keyword(query, scope, kw):
    r = ReferenceResolver().resolve(query)
    assert (r.scope.value, r.matched_keyword) == (scope, kw)


def test_seed_defects_are_fixed():
    res = ReferenceResolver()
    assert res.resolve("Please adjust the font size").reference_type == ReferenceType.NONE  # no "just" in "adjust"
    assert res.resolve("你上次说的餐厅叫什么").scope == ReferenceScope.ASSISTANT_LAST_STANCE  # longest keyword wins
    # stance cache: newest by real time, not by string order ("2026-1-9" > "2026-01-10" as strings)
    cache = {"缓存": {"stance": "用 Redis", "updated_at": "2026-01-10T09:00:00+00:00"},
             "数据库": {"stance": "用 PostgreSQL", "updated_at": datetime(2026, 1, 9, 23, tzinfo=timezone.utc)},
             "队列": {"stance": "用 Kafka", "updated_at": "2026-01-10T08:00:00+08:00"}}
    r = res.resolve("之前你说的那个方案", [{"role": "assistant", "content": "我认为都行"}], stance_cache=cache)
    assert r.resolved_content == "关于「缓存」: 用 Redis"


def test_topic_scope_and_fallback():
    history = [Message(f"m{i}", "u", "s", i, "user" if i % 2 == 0 else "assistant", f"msg {i}",
                       datetime(2026, 1, 1, tzinfo=timezone.utc), topic="trip" if i == 3 else None) for i in range(10)]
    r = ReferenceResolver().resolve("那件事后来怎样", history)
    assert r.source_turns == [1, 2, 3, 4, 5] and r.recall_turns == 6
    no_topic = [{"role": "user", "content": f"x{i}"} for i in range(10)]
    assert ReferenceResolver().resolve("that thing again", no_topic).source_turns == list(range(4, 10))


def test_stance_from_english_history_and_none():
    hist = [{"role": "assistant", "content": "I think the red one fits better."}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "Sure."}]
    assert ReferenceResolver().resolve("Is what you said earlier right?",
                                       hist).resolved_content == "I think the red one fits better."
    assert ReferenceResolver().resolve("you said earlier", [{"role": "assistant",
                                                             "content": "Hi"}]).resolved_content is None
    assert ReferenceResolver().resolve("   ").reference_type == ReferenceType.NONE


def test_update_config_add_mapping_language_and_factory(tmp_path):
    res = ReferenceResolver()
    res.update_config(just_now_turns=5, last_few_turns=2, recently_turns=20, recent_turns=7, session_max_turns=100)
    assert (res.config.last_few_turns, res.config.recent_turns, res.config.session_max_turns) == (5, 20, 100)
    res.update_config(last_few_turns=4)
    assert res.config.last_few_turns == 4
    res.add_mapping("前天", "last_5_10_turns", "temporal", language="cn")
    assert res.resolve("前天的事").matched_keyword == "前天"
    assert res._detect_language("这是中文句子 with English") == "cn"
    assert res._detect_language("mostly English 中") == "en"
    path = tmp_path / "rr.yaml"
    path.write_text("reference_resolver:\n  last_few_turns: 2\n  use_llm_fallback: true\n", encoding="utf-8")
    made = create_reference_resolver(str(path), recent_turns=12)
    assert (made.config.last_few_turns, made.config.recent_turns, made.config.use_llm_fallback) == (2, 12, True)
    path.write_text("reference_resolver:\n  last_few_turnz: 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="last_few_turnz"):
        ReferenceResolverConfig.from_yaml(path)


def test_llm_fallback_only_when_enabled_and_below_threshold():
    calls = []

    def llm(query, history):
        calls.append(query)
        return {"scope": "current_session", "type": "temporal", "confidence": 0.7}

    off = ReferenceResolver(llm_resolver=llm)
    assert off.resolve("what was that about").reference_type == ReferenceType.NONE and not calls
    on = ReferenceResolver(ReferenceResolverConfig(use_llm_fallback=True), llm_resolver=llm)
    r = on.resolve("what was that about")
    assert r.scope == ReferenceScope.CURRENT_SESSION and r.metadata["method"] == "llm"
    assert on.resolve("刚才说的").metadata["method"] == "rule"  # confident rule match: no LLM
    assert on.resolve("I just asked").metadata["method"] == "llm"  # "just" (0.4) is below the 0.5 threshold
