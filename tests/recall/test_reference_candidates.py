"""`signals.reference_front`: referenced turns join the recall candidates and lead them when the question refers back
to a few turns (seed recall-v4 §2.2.2 step 1, reference-resolver §3.4): the learned fusion, which scores being in
scope as one feature among many, may not push them out. The seed's two examples, over a 64-message history, with
and without a session id. Off by default until it is measured on the held-back sets (issue 87)."""
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.memory import Embedder, MemoryStore
from dkilab.recall import MultiSignalRecall, ReferenceResolver, validate_recall_config
from dkilab.types import Message

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
EARLIER = ["我们公司的营销方案下周要提交。", "那个方案的预算够吗？", "预算还差一点，我在想办法。",
           "可以先砍掉广告部分。", "旅行的方案定了吗？", "定了，先去杭州再去苏州。", "周末天气怎么样？",
           "听说会下雨，记得带伞。", "我最近在学做饭。", "你可以先从番茄炒蛋开始。", "装修方案我看了三个版本。",
           "第二个版本的厨房设计最好。",
           "孩子的学习方案需要调整吗？", "数学可以多练习一些。", "我想换一台新电脑。", "预算多少？"]
SORTING = [("user", "有什么好的排序算法？"), ("assistant", "推荐使用快速排序，平均复杂度是O(n log n)。"),
           ("user", "还有呢？"), ("assistant", "归并排序也不错，而且是稳定排序。")]
STANCE = [("user", "我们的网站太慢了，怎么办？"), ("assistant", "我建议使用Redis作为缓存层。"),
          ("user", "好的，我回去试试。"), ("assistant", "有问题随时问我。")]


@pytest.fixture(scope="module")
def e5():
    return Embedder("offline:e5")


def _store(tmp_path, embedder, last):
    """60 earlier messages in three sessions, then the example's turns as the current session s3."""
    msgs = [Message(f"t{i}", "u", f"s{i // 20}", i % 20, "user" if i % 2 == 0 else "assistant", EARLIER[i % 16],
                    T0 + timedelta(minutes=i)) for i in range(60)]
    msgs += [Message(f"t{60 + j}", "u", "s3", j, role, text, T0 + timedelta(minutes=60 + j))
             for j, (role, text) in enumerate(last)]
    store = MemoryStore.open(tmp_path / "s", embedder=embedder)
    store.add_messages(msgs)
    return store


@pytest.mark.parametrize("session", [None, "s3"])
@pytest.mark.parametrize("fusion", ["learned", "weighted"])
def test_just_now_puts_the_last_turns_in_front(tmp_path, e5, session, fusion):
    with _store(tmp_path, e5, SORTING) as store:
        def top5(front):
            cfg = validate_recall_config({"signals": {"fusion": fusion, "reference_front": front}})
            res = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"), embedder=e5).recall(
                "刚才你说的那个方案是什么？", session_id=session)
            assert res.reference_scope == "last_1_3_turns"
            return {m.message_id for m in res.messages[:5]}
        assert {"t60", "t61", "t62", "t63"} <= top5(5)
        if session is None:  # off, the fusion ranks them far down; a session's recent supplement holds them anyway
            assert not {"t60", "t61", "t62", "t63"} & top5(0)


@pytest.mark.parametrize("session", [None, "s3"])
def test_the_stance_referred_to_is_in_front(tmp_path, e5, session):
    with _store(tmp_path, e5, STANCE) as store:
        cfg = validate_recall_config({"signals": {"reference_front": 5}})
        msr = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"), embedder=e5)
        res = msr.recall("之前你说的那个建议还有效吗？", session_id=session)
        assert res.reference_scope == "assistant_last_stance"
        assert "t61" in [m.message_id for m in res.messages[:5]]


def test_a_wide_scope_joins_the_candidates_without_taking_the_front(tmp_path, e5):
    """"最近" (the last 50 turns) is a range to search, not an answer: the ranking decides within it."""
    with _store(tmp_path, e5, SORTING) as store:
        cfg = validate_recall_config({"signals": {"reference_front": 5}})
        msr = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"), embedder=e5)
        res = msr.recall("我们最近聊的装修方案怎么样？")
        assert res.reference_scope == "current_session" and res.reference_hits == 64
        assert res.messages[0].content.startswith("装修方案")


def test_off_by_default_and_out_of_the_identity_while_off():
    from dkilab.eval.harness.experiment import identity_params
    assert validate_recall_config({}).signals.reference_front == 0
    assert "reference_front" not in identity_params(validate_recall_config({}))["signals"]
    on = validate_recall_config({"signals": {"reference_front": 3}})
    assert identity_params(on)["signals"]["reference_front"] == 3


@pytest.mark.parametrize("question, points_back", [
    ("刚才你说的那个方案是什么？", True), ("你刚刚推荐的书叫什么？", True), ("我刚才说的预算你记住了吗？", True),
    ("What did you just say about the budget?", True), ("Which restaurant did you just recommend?", True),
    ("Can you repeat what you said just now?", True), ("what did we just discuss", True),
    ("That thing you suggested, is it safe?", True), ("之前你说的那个建议还有效吗？", True),
    ("我刚刚到家，好累。", False), ("我刚刚完成了比赛！", False), ("I just finished the race!", False),
    ("I just told my boss about the move.", False), ("I just want to know my schedule.", False),
    ("I just now realized I forgot my keys.", False), ("What is the name of my cat?", False),
])
def test_a_just_points_back_only_with_what_was_said(question, points_back):
    """The cues the front takes (`reference_front_rule: said`): a "just" / "刚才" with a speech verb, or a sure
    referential or stance cue; "I just finished..." dates the user's own news (MADial-Bench en has 20 such)."""
    from dkilab.recall.reference import refers_back
    assert refers_back(question, ReferenceResolver().resolve(question)) is points_back


def test_news_of_the_user_keeps_the_fusion_order_unless_every_cue_takes_the_front(tmp_path, e5):
    """"我刚刚到家" maps to the last 3 turns as "刚才" does, but points at nothing said: under the default rule the
    ranking is the fusion's (as with the front off); `reference_front_rule: any` is the rule before, which fronts it."""
    question = "我刚刚到家，装修方案的厨房设计哪个版本最好？"
    with _store(tmp_path, e5, SORTING) as store:
        def ranked(signals):
            cfg = validate_recall_config({"signals": signals})
            res = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"), embedder=e5).recall(question)
            assert res.reference_scope == "last_1_3_turns"
            return [m.message_id for m in res.messages[:5]]
        off = ranked({})
        assert ranked({"reference_front": 5}) == off
        assert set(ranked({"reference_front": 5, "reference_front_rule": "any"})[:4]) == {"t60", "t61", "t62", "t63"}
        assert not {"t60", "t61", "t62", "t63"} & set(off)


def test_the_rule_is_in_the_identity_only_while_the_front_is_on():
    from dkilab.eval.harness.experiment import identity_params
    assert "reference_front_rule" not in identity_params(validate_recall_config({}))["signals"]
    on = identity_params(validate_recall_config({"signals": {"reference_front": 5}}))["signals"]
    assert on["reference_front_rule"] == "said"


@pytest.mark.parametrize("session", [None, "s3"])
def test_the_seeds_pipeline_puts_what_its_two_examples_refer_to_in_front(tmp_path, e5, session):
    """`recall: {preset: seed}` (and so `seed: true`): the reference decides where recall looks (§2.2.2 step 1).
    Its two examples, "刚才你说的那个方案" and "之前你说的那个建议", rank the turns they point at in the top 5 with and
    without a session id; with the front taken off the preset, the first is lost without a session id (no keyword
    of it is in those turns, and the vectors prefer the earlier 方案 turns)."""
    def top5(store, question, **signals):
        cfg = validate_recall_config({"preset": "seed", "signals": signals})
        assert cfg.signals.fusion == "seed"
        res = MultiSignalRecall(cfg, ReferenceResolver(), store.for_user("u"), embedder=e5).recall(
            question, session_id=session)
        return [m.message_id for m in res.messages[:5]]

    with _store(tmp_path / "a", e5, SORTING) as store:
        assert {"t60", "t61", "t62", "t63"} <= set(top5(store, "刚才你说的那个方案是什么？"))
        if session is None:
            assert not {"t60", "t61", "t62", "t63"} & set(top5(store, "刚才你说的那个方案是什么？", reference_front=0))
    with _store(tmp_path / "b", e5, STANCE) as store:
        assert "t61" in top5(store, "之前你说的那个建议还有效吗？")
    assert validate_recall_config({"preset": "seed"}).signals.reference_front == 3
