"""Metrics against hand-checked cases."""
import pytest

from dkilab.eval.metrics import (aggregate, choice_accuracy, claims, exact_match, f1_score, is_abstention,
                                 locomo_score, normalize_answer, score_answer, unsupported_claims, zh_f1)
from dkilab.types import Answer, FactCall, QAItem

# (prediction, gold, category, expected score) — worked out by hand from the official rules
LOCOMO_CASES = [
    ("Paris", "Paris", 4, 1.0),
    ("The Paris, France", "paris france", 4, 1.0),                 # commas, article, case removed
    ("She adopted a cat", "adopting cats", 4, 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)),  # stems: adopt, cat | adopt, cat
    ("running", "ran", 2, 0.0),                                      # porter does not map ran -> run
    ("7 May 2023", "7 May 2023", 2, 1.0),
    ("7 May", "7 May 2023", 2, 2 * 1.0 * (2 / 3) / (1.0 + 2 / 3)),
    ("pottery", "pottery; camping", 3, 1.0),                         # cat 3: gold cut at the first ';'
    ("camping", "pottery; camping", 3, 0.0),
    ("pottery, camping", "camping, pottery", 1, 1.0),                # cat 1: best part per gold part
    ("pottery", "camping, pottery", 1, 0.5),
    ("pottery and swimming, camping", "camping, pottery", 1, (1.0 + 2 * 0.5 * 1.0 / 1.5) / 2),
    ("Not mentioned in the conversation", "", 5, 1.0),
    ("No information available.", "", 5, 1.0),
    ("I don't know", "", 5, 0.0),                                    # official rule: only the two phrases
    ("Yes, in 2022", "", 5, 0.0),
    ("", "Paris", 4, 0.0),
]


@pytest.mark.parametrize("pred, gold, cat, expected", LOCOMO_CASES)
def test_locomo_official_scoring(pred, gold, cat, expected):
    assert locomo_score(pred, gold, cat) == pytest.approx(expected)


def test_normalisation_and_exact_match():
    assert normalize_answer("The cat, and A dog!") == "cat dog"
    assert exact_match("dog the cat", "Cat, dog.") and not exact_match("cat", "cat dog")
    assert f1_score("a an the and", "cat") == 0.0


def test_chinese_f1_and_multiple_choice():
    assert zh_f1("浅色橡木地板", "浅色橡木") == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0), rel=0.35)
    assert zh_f1("三十五万。", "三十五万") == 1.0 and zh_f1("灰色", "浅色橡木") == 0.0
    choices = {"A": "周一", "B": "周二", "C": "周三"}
    assert choice_accuracy("B", "B", choices) == 1.0
    assert choice_accuracy("答案是周二", "B", choices) == 1.0
    assert choice_accuracy("A. 周一", "B", choices) == 0.0
    assert choice_accuracy("不知道", "B", choices) == 0.0


ABSTAIN = [
    "Not mentioned.", "Not mentioned in the conversation.", "That was not mentioned.", "It is not specified.",
    "This has not been mentioned.", "No information available.", "There is no information about that.",
    "No mention of it in our chats.", "I don't know.", "I do not know.", "I can't recall that.",
    "I cannot determine that from the history.", "I'm not sure.", "I am not sure about that.", "Unknown.",
    "The answer is unknown.", "That is not in my memory.", "It's not in the conversation history.",
    "You never mentioned it.", "You haven't told me that.", "It wasn't mentioned.", "That was never said.",
    "There is no record of that.", "I couldn't find that in our conversation.", "Insufficient information.",
    "Not enough information to answer.", "I don't remember you saying that.", "I didn't find any mention of it.",
    "Sorry, I'm unable to answer that.", "That hasn't been mentioned.",
    "没有提到。", "对话中没有提到这个。", "您没有提及。", "未提及。", "无法确定。", "我不知道。", "不清楚。",
    "记忆中没有相关信息。", "历史记录里没有。", "没有相关记录。", "无从得知。", "您没说过这个。", "我不记得了。",
    "无法回答这个问题。", "对话里并未提到。", "没有相关信息。", "这个我不能确定。", "您之前没有说明。",
]
ANSWERS = [
    "Pixel.", "Your cat is called Pixel.", "27 Linden Row.", "Green tea.", "The Alpine Loop on 14 September.",
    "Yes, you became vegetarian.", "It is in June.", "Helga is your coach.", "Sencha or genmaicha.",
    "You know it is the left knee.", "No, you stopped eating steak.", "She mentioned pottery and camping.",
    "翠湖云居。", "浅色橡木。", "三十五万。", "王经理。", "您现在能吃一点微辣。", "周一休息。", "MU5806。",
    "您说周二去。", "是的，客户签了合同。", "朵朵。", "知道了，地板是浅色橡木。", "下周开始木工。",
]


def test_abstention_detector_on_labelled_phrasings():
    assert len(ABSTAIN) + len(ANSWERS) >= 60
    missed = [a for a in ABSTAIN if not is_abstention(a)]
    false = [a for a in ANSWERS if is_abstention(a)]
    assert not missed and not false, (missed, false)


def test_unsupported_claims():
    ctx = "Maya moved to 27 Linden Row with her cat Pixel; the rent is 1,450 euros."
    assert unsupported_claims("Pixel lives at 27 Linden Row.", ctx) == []
    assert set(unsupported_claims("Pixel lives at 31 Harbour Street with Jana.", ctx)) == {"31", "Harbour Street", "Jana"}
    assert "1450" in claims("The rent is 1450 euros.") and unsupported_claims("The rent is 1450 euros.", ctx) == []
    assert set(unsupported_claims("您住在翠湖云居，每晚五百元。", "住在翠湖云居，每晚四百八十元")) >= {"五百"}


def test_score_rows_and_aggregate():
    ans_q = QAItem("What is my cat called?", "Pixel", "single_hop", ["m1"], True)
    un_q = QAItem("What is my dog called?", None, "unanswerable", [], False)
    good = Answer("Pixel.", recalled_ids=["m1"], context_text="my cat Pixel", prompt_tokens=100,
                  fact_calls=[FactCall("m1", 0, 5, valid=True, tokens=20, found=True)], rounds=2,
                  latency_ms={"recall": 2.0, "generation": 50.0})
    bad = Answer("Your dog is called Rex.", context_text="my cat Pixel", prompt_tokens=80,
                 fact_calls=[FactCall(None, 0, 0, valid=False, malformed=True)])
    rows = [score_answer(ans_q, good, "fixtures") | {"category": "single_hop"},
            score_answer(un_q, bad, "fixtures") | {"category": "unanswerable"},
            score_answer(un_q, Answer("Not mentioned."), "fixtures") | {"category": "unanswerable"},
            {"error": "Traceback ...", "category": "single_hop"}]
    assert rows[0]["score"] == 1.0 and rows[0]["evidence_in_context"] == 1.0 and rows[0]["unsupported_claim_rate"] == 0
    agg = aggregate(rows)
    assert agg["errors"] == 1 and agg["questions"] == 4
    assert agg["hallucination_rate"] == 0.5 and agg["answer_score"] == 1.0
    assert agg["fact_call_rate"] == pytest.approx(2 / 3) and agg["valid_call_rate"] == 0.5
    assert agg["malformed_call_rate"] == 0.5 and agg["evidence_hit_rate"] == 0.5 and agg["mean_rounds"] == pytest.approx(4 / 3)
    assert agg["latency_generation_p50_ms"] == 0.0 and agg["prompt_tokens"] == pytest.approx(60)


@pytest.mark.parametrize("reply,verdict", [
    ("CORRECT", 1.0), ("Correct.", 1.0), ("WRONG", 0.0), ("incorrect", 0.0), ("The answer is wrong, not correct", 0.0),
    ("correct, not wrong", 1.0), ("正确", 1.0), ("错误", 0.0), ("不正确", 0.0), ("I think so", None), ("", None),
])
def test_judge_verdicts_are_parsed_from_the_first_label(reply, verdict):
    from dkilab.eval.metrics.judge import parse_verdict

    assert parse_verdict(reply) == verdict


def test_judge_prompt_uses_the_choice_text_and_skips_unanswerable(model):
    from dkilab.eval.metrics.judge import LLMJudge, gold_text

    mc = QAItem("我的同事叫什么？", "B", choices={"A": "王芳", "B": "李雷"})
    assert gold_text(mc) == "李雷"
    judge = LLMJudge(model, max_new_tokens=4)
    assert judge.judge(QAItem("Where?", None, answerable=False), "Paris") == (None, "")
    verdict, reply = judge.judge(QAItem("What is the capital of France?", "Paris"), "Paris")
    assert reply and verdict in (0.0, 1.0, None)
    with pytest.raises(ValueError, match=r"\{gold\}"):
        LLMJudge(model, prompt="Q: {question} A: {prediction}")
