"""Metrics against hand-checked cases."""
import pytest
from dkilab.eval.scoring import (
    aggregate,
    choice_accuracy,
    claims,
    exact_match,
    f1_score,
    is_abstention,
    locomo_score,
    normalize_answer,
    score_answer,
    unsupported_claims,
    zh_f1,
)
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
    # the official scorer strips articles with the `regex` package: a combining mark is a word character
    # there (so no \b before "the"), while Python's re would strip it
    assert normalize_answer("cafe\u0301the end") == "cafe\u0301the end"
    assert normalize_answer("x \u0301a b") == "x \u0301a b"


def test_chinese_f1_and_multiple_choice():
    assert zh_f1("浅色橡木地板", "浅色橡木") == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0), rel=0.35)
    assert zh_f1("三十五万。", "三十五万") == 1.0 and zh_f1("灰色", "浅色橡木") == 0.0
    choices = {"A": "周一", "B": "周二", "C": "周三"}
    assert choice_accuracy("B", "B", choices) == 1.0
    assert choice_accuracy("答案是周二", "B", choices) == 1.0
    assert choice_accuracy("A. 周一", "B", choices) == 0.0
    assert choice_accuracy("不知道", "B", choices) == 0.0


# Earlier hand-labelled phrasings, kept as a regression set beside datasets/fixtures/abstention/
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
    # the misses issue 18 and issue 10 named
    "The conversation does not mention this.", "That was never discussed.", "There's nothing about that in our chats.",
    "It isn't stated anywhere.", "I'm not able to find that in my memory.", "答案是Not mentioned。",
    # SmolLM2 outputs from the quickstart (cut at max_new_tokens)
    "I'm sorry for any confusion, but I'm sorry for any confusion, I'm not able to provide that informati",
    "User: I'm sorry, I'm not familiar with the colour of your bike.", "没有提到。\n\n这是一个问题，可以用一个简",
    "The answer is not mentioned.",
]
ANSWERS = [
    "Pixel.", "Your cat is called Pixel.", "27 Linden Row.", "Green tea.", "The Alpine Loop on 14 September.",
    "Yes, you became vegetarian.", "It is in June.", "Helga is your coach.", "Sencha or genmaicha.",
    "You know it is the left knee.", "No, you stopped eating steak.", "She mentioned pottery and camping.",
    "翠湖云居。", "浅色橡木。", "三十五万。", "王经理。", "您现在能吃一点微辣。", "周一休息。", "MU5806。",
    "您说周二去。", "是的，客户签了合同。", "朵朵。", "知道了，地板是浅色橡木。", "下周开始木工。",
    # negations about people in the story are answers (issue 18)
    "She didn't know about the surprise party until Friday.", "He couldn't find his keys, so he was late.",
    "She never mentioned it to her boss, only to her sister.", "The dog is called Unknown Soldier.",
    "她不知道那天会下雨，所以没带伞。", "I'm not sure, maybe Paris.", "Not mentioned. But probably Paris.",
    "没有提到。不过可能是周二。", "The answer is \"red\"",
    "Tom: I crashed on the quarry hill yesterday, nothing broken.",
]


def test_abstention_detector_on_regression_phrasings():
    missed = [a for a in ABSTAIN if not is_abstention(a)]
    false = [a for a in ANSWERS if is_abstention(a)]
    assert not missed and not false, (missed, false)


def test_labelled_abstention_set_meets_its_card():
    from collections import Counter

    from dkilab.eval.scoring import load_phrasings

    rows = load_phrasings()
    assert len(rows) >= 400 and len({r["id"] for r in rows}) == len(rows) and len({r["text"]
                                                                                   for r in rows}) == len(rows)
    for lang in ("en", "zh"):
        answers = [r for r in rows if r["lang"] == lang and not r["abstains"]]
        hard = [r for r in answers if r["kind"] in ("negation", "hedge", "quote")]
        assert len(hard) * 3 >= len(answers), lang  # at least a third of the answers are hard negatives
        halves = Counter((r["split"], r["abstains"]) for r in rows if r["lang"] == lang)
        for label in (True, False):  # the halves are balanced within a label (split by hash, alternating)
            assert abs(halves[("dev", label)] - halves[("test", label)]) <= 5, (lang, label, halves)
    assert {r["kind"] for r in rows} == {"abstain", "answer", "negation", "hedge", "quote"}
    assert all(r["abstains"] == (r["kind"] == "abstain") for r in rows)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_abstention_detector_precision_and_recall_per_language(split):
    from dkilab.eval.scoring import evaluate_detector

    figures = evaluate_detector(split=split)
    assert set(figures) == {"en", "zh"}
    for lang, m in figures.items():  # issue 18's target: >= 0.98 each, on both halves
        assert m["precision"] >= 0.98 and m["recall"] >= 0.98, (split, lang, m)


def test_abstention_detector_decides_on_the_whole_answer():
    from dkilab.prompts import ABSTAIN_PHRASE
    from dkilab.text.abstention import clauses

    assert all(is_abstention(p) for p in ABSTAIN_PHRASE.values())  # the phrase the prompts ask for
    assert is_abstention("Not mentioned.") and not is_abstention("Not mentioned. But probably Paris.")
    assert is_abstention("I'm not sure.") and not is_abstention("I'm not sure, but I think it was May.")
    assert not is_abstention('She said "I don\'t know".') and not is_abstention("她说：“我不知道。”")
    assert [c.kind for c in clauses("Sorry, I don't know, could you remind me?")] == ["filler", "absence", "filler"]
    assert [c.kind for c in clauses("她没提价格，但说房子有个阳台。")] == ["absence", "content"]
    assert not is_abstention("") and not is_abstention("Yes.") and not is_abstention("No.")


def test_unsupported_claims():
    ctx = "Maya moved to 27 Linden Row with her cat Pixel; the rent is 1,450 euros."
    assert unsupported_claims("Pixel lives at 27 Linden Row.", ctx) == []
    assert set(unsupported_claims("Pixel lives at 31 Harbour Street with Jana.", ctx)) == {"31", "Harbour Street",
                                                                                           "Jana"}
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
    rows = [score_answer(ans_q, good) | {"category": "single_hop"},
            score_answer(un_q, bad) | {"category": "unanswerable"},
            score_answer(un_q, Answer("Not mentioned.")) | {"category": "unanswerable"},
            {"error": "Traceback ...", "category": "single_hop"}]
    assert rows[0]["score"] == 1.0 and rows[0]["evidence_in_context"] == 1.0 and rows[0]["unsupported_claim_rate"] == 0
    assert rows[1]["hallucinated"] == 1.0 and rows[2]["hallucinated"] == 0.0 and "hallucinated" not in rows[0]
    agg = aggregate(rows)
    assert agg["errors"] == 1 and agg["questions"] == 4
    assert agg["hallucination_rate"] == 0.5 and agg["answer_score"] == 1.0
    assert agg["fact_call_rate"] == pytest.approx(2 / 3) and agg["valid_call_rate"] == 0.5
    assert agg["malformed_call_rate"] == 0.5 and agg["evidence_hit_rate"] == 0.5
    assert agg["mean_rounds"] == pytest.approx(4 / 3)
    assert agg["latency_generation_p50_ms"] == 0.0 and agg["prompt_tokens"] == pytest.approx(60)
    # a judge's abstention label overrides the rules
    assert score_answer(un_q, bad, abstained=True)["hallucinated"] == 0.0


def test_scorers_follow_the_dataset_declaration():
    from dkilab.eval.data import DATASETS
    from dkilab.eval.scoring import SCORERS

    assert {DATASETS.meta(n)["scorer"] for n in DATASETS} <= set(SCORERS)
    cat5 = QAItem("Did she adopt a dog?", None, 5, [], False)
    assert score_answer(cat5, Answer("Not mentioned in the conversation"), "locomo")["score"] == 1.0
    assert score_answer(cat5, Answer("I don't know."), "locomo")["score"] == 0.0  # the official cat-5 rule
    assert score_answer(cat5, Answer("I don't know."), "f1")["score"] == 1.0  # elsewhere: an abstention is right
    multi = QAItem("Hobbies?", "pottery, camping", 1, [], True)
    assert score_answer(multi, Answer("camping and pottery"), "locomo")["score"] == pytest.approx(
        locomo_score("camping and pottery", "pottery, camping", 1))
    zh = QAItem("地板什么颜色？", "浅色橡木", None, [], True)
    assert score_answer(zh, Answer("浅色橡木。"), "auto")["score"] == 1.0
    mc = QAItem("哪天？", "B", None, [], True, choices={"A": "周一", "B": "周二"})
    assert score_answer(mc, Answer("周二"), "auto")["accuracy"] == 1.0


def test_metrics_are_declared_once_and_drive_tables_and_categories():
    from dkilab.eval.scoring import (
        METRICS,
        category_metrics,
        declared,
        metric,
        metrics_version,
        primary_metric,
        table_metrics,
    )

    names = [m.name for m in declared()]
    assert len(names) == len(set(names))
    assert table_metrics()[:2] == ["score", "answer_score"] and "hallucination_rate" in table_metrics()
    assert "score" in category_metrics() and "prompt_tokens" not in category_metrics()
    assert primary_metric({"recall_at_10": 1, "mrr": 1}) == "recall_at_10" and primary_metric({"score": 1}) == "score"
    assert METRICS["hallucination_rate"].depends_on == "abstention"
    before = metrics_version()

    @metric("answer_length", higher_is_better=None, rank=44, per_category=True)
    def answer_length(q):  # a new metric is one declaration
        return len(q.answer.text.split())

    try:
        row = score_answer(QAItem("Q?", "a b"), Answer("one two three"))
        assert row["answer_length"] == 3 and aggregate([row])["answer_length"] == 3
        assert "answer_length" in table_metrics() and "answer_length" in category_metrics()
        assert metrics_version() != before
    finally:
        METRICS.remove("answer_length")
    assert metrics_version() == before


def test_bootstrap_intervals_and_paired_differences():
    from dkilab.eval.scoring import METRICS
    from dkilab.eval.scoring.bootstrap import intervals, paired

    rows = [{"qid": f"q{i}", "user_id": f"u{i % 8}", "answerable": True, "score": float(i % 3 == 0)} for i in range(80)]
    lo, hi = intervals(rows)["score"]
    mean = sum(r["score"] for r in rows) / len(rows)
    assert lo < mean < hi and hi - lo < 0.4 and intervals(rows)["score"] == (lo, hi)  # seeded: reproducible
    better = [r | {"score": 1.0} for r in rows]
    res = paired(METRICS["score"], rows, better)
    assert res["diff"] == pytest.approx(1 - mean) and res["real"] and res["low"] > 0 and res["n"] == 80
    same = paired(METRICS["score"], rows, [dict(r) for r in rows])
    assert same["diff"] == 0 and not same["real"]
    noisy = [r | {"score": float(i % 2)} for i, r in enumerate(rows)]  # a small, noisy change is not called real
    assert not paired(METRICS["score"], rows, noisy[:10] + rows[10:])["real"]
    # fewer than 5 conversations: questions are resampled instead
    few = [r | {"user_id": "u0"} for r in rows]
    assert paired(METRICS["score"], few, better)["resampled"] == "question"


@pytest.mark.parametrize("reply,verdict", [
    ("CORRECT", 1.0), ("Correct.", 1.0), ("WRONG", 0.0), ("incorrect", 0.0), ("The answer is wrong, not correct", 0.0),
    ("correct, not wrong", 1.0), ("正确", 1.0), ("错误", 0.0), ("不正确", 0.0), ("I think so", None), ("", None),
])
def test_judge_verdicts_are_parsed_from_the_first_label(reply, verdict):
    from dkilab.eval.scoring.judge import parse_verdict

    assert parse_verdict(reply) == verdict


def test_judge_prompt_uses_the_choice_text_and_skips_unanswerable(model):
    from dkilab.eval.scoring.judge import LLMJudge, gold_text

    mc = QAItem("我的同事叫什么？", "B", choices={"A": "王芳", "B": "李雷"})
    assert gold_text(mc) == "李雷"
    judge = LLMJudge(model, max_new_tokens=4)
    assert judge.judge(QAItem("Where?", None, answerable=False), "Paris") == (None, "")
    verdict, reply = judge.judge(QAItem("What is the capital of France?", "Paris"), "Paris")
    assert reply and verdict in (0.0, 1.0, None)
    with pytest.raises(ValueError, match=r"\{gold\}"):
        LLMJudge(model, prompt="Q: {question} A: {prediction}")


def test_batched_judging_gives_the_one_by_one_verdicts_and_generates_each_prompt_once(model, monkeypatch):
    """Issue 29 item 2: a cell's judge prompts are generated in batches before scoring (greedy, so each
    reply equals the reply to that prompt alone)."""
    from dkilab.eval.scoring.judge import LLMJudge

    items = [(QAItem("What is the capital of France?", "Paris"), "Paris"), (QAItem("Who wrote Hamlet?", "Shakespeare"),
             "Marlowe"), (QAItem("What colour is the sky?", "blue"), "It is blue."), (QAItem("2+2?", "4"), "four")]
    alone = [LLMJudge(model, max_new_tokens=4, abstention=True) for _ in range(2)]
    one_by_one = [(alone[0].judge(q, p), alone[0].abstains(q.question, p)) for q, p in items]
    batched = alone[1]
    texts = [t for q, p in items for t in (batched.judge_text(q, p), batched.abstention_text(q.question, p))]
    assert batched.prefetch(texts, batch_size=3) == 8
    monkeypatch.setattr(model, "generate", lambda *a, **kw: pytest.fail("a prefetched prompt was generated again"))
    assert [(batched.judge(q, p), batched.abstains(q.question, p)) for q, p in items] == one_by_one


@pytest.mark.parametrize("reply,label", [("DECLINES", True), ("It declines.", True), ("ANSWERS", False),
                                         ("The answer answers it", False), ("maybe", None)])
def test_abstention_judge_replies_are_parsed(reply, label):
    from dkilab.eval.scoring.judge import parse_abstention

    assert parse_abstention(reply) == label


def test_a_metric_no_question_had_is_not_the_headline():
    from dkilab.eval.scoring import primary_metric

    # a recall-agent view cell on MemDaily: no answers (score NaN), no gold statements, gold evidence ids
    assert primary_metric({"score": float("nan"), "view_evidence_recall": 0.5, "errors": 0.0}) == "view_evidence_recall"
    assert primary_metric({"score": 0.2, "view_recall": 1.0}) == "score"


def test_retrieval_metrics_the_field_reports_against_hand_worked_rankings():
    """any-hit (LongMemEval recall_any@k), session any-hit and NDCG@10 on rankings worked out by hand."""
    import math

    from dkilab.eval.scoring.retrieval import any_hit, ndcg, session_ranking

    ranked = ["a", "b", "c", "d", "e", "f"]
    assert any_hit(ranked, ["f"], 5) == 0.0 and any_hit(ranked, ["f"], 10) == 1.0
    # evidence at ranks 2 and 4 of 2 gold: (1/log2 3 + 1/log2 5) / (1 + 1/log2 3)
    assert ndcg(ranked, ["b", "d"], 10) == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert ndcg(ranked, ["a", "b"], 10) == 1.0 and ndcg(ranked, ["z"], 10) == 0.0
    assert ndcg(["x"] * 10 + ["a"], ["a"], 10) == 0.0  # past the cut-off counts nothing
    assert session_ranking(["S1", "S1", "S2", "S1", "S3"]) == ["S1", "S2", "S3"]

    item = QAItem("When did we go?", "May", 2, ["m9"], metadata={"evidence_sessions": ["S6"]})
    # six sessions ahead of the gold one at message level, but S1 holds three of the top messages
    ids = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m9"]
    sessions = ["S1", "S1", "S1", "S2", "S3", "S4", "S5", "S6"]
    row = score_answer(item, Answer("", recalled_ids=ids, kind="ranking", metadata={"recalled_sessions": sessions}))
    assert row["any_hit_at_5"] == 0.0 and row["any_hit_at_10"] == 1.0
    assert row["session_any_hit_at_5"] == 0.0  # S6 is the 6th session
    row = score_answer(item, Answer("", recalled_ids=ids[3:], kind="ranking",
                                    metadata={"recalled_sessions": sessions[3:]}))
    assert row["session_any_hit_at_5"] == 1.0 and row["ndcg_at_10"] == pytest.approx(1 / math.log2(6))
    assert row["recall_at_10"] == 1.0
    # an answer that is not a ranking gets none of them
    assert "ndcg_at_10" not in score_answer(item, Answer("May."))


def test_skewed_intervals_print_as_low_high_not_plus_minus():
    """Issue 34: a p50 latency of 0.919 ms whose interval reaches 3,459 ms is not "0.919 ±1729.021"."""
    import pandas as pd
    from dkilab.eval.views.tables import fmt_interval, with_pm

    assert fmt_interval(0.5, 0.4, 0.6) == "0.500 ±0.100"
    assert fmt_interval(0.919, 0.5, 3459.0) == "0.919 [0.500, 3459.000]"
    assert fmt_interval(1.0, 0.8, 1.0) == "1.000 [0.800, 1.000]"  # at the edge: one-sided
    frame = pd.DataFrame({"score": [0.5], "score_low": [0.45], "score_high": [0.56],
                          "latency_total_p50_ms": [0.919], "latency_total_p50_ms_low": [0.5],
                          "latency_total_p50_ms_high": [3459.0]}, index=["a@x"])
    shown = with_pm(frame)
    assert shown.at["a@x", "score"] == "0.500 ±0.055" and "[" in shown.at["a@x", "latency_total_p50_ms"]


@pytest.mark.parametrize("seed", range(40))
def test_percentile_intervals_resample_exactly_as_concatenating_each_draw(seed, monkeypatch):
    """The p50/p95 intervals' resampling (one sort, cumulative counts, in blocks of draws) gives numpy's
    nearest-rank percentile of each draw's concatenated clusters, value for value: with ties, clusters of
    unequal size, one cluster, and blocks smaller than the draws."""
    import numpy as np
    from dkilab.eval.scoring import bootstrap

    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 60))
    n = int(rng.integers(1, size + 1))
    groups = np.concatenate([np.arange(n), rng.integers(0, n, size - n)])
    rng.shuffle(groups)
    values = np.round(rng.exponential(10, size), 0)  # rounded: ties
    draws = bootstrap._draws(n, seed)[:64]
    members = [values[groups == g] for g in range(n)]
    if seed % 2:
        monkeypatch.setattr(bootstrap, "CELLS", 7 * size)  # blocks of 7 draws
    for q in (50, 95):
        want = [np.percentile(np.concatenate([members[g] for g in d]), q, method="nearest") for d in draws]
        assert bootstrap._resampled_percentiles(values, groups, n, draws, q).tolist() == want


def test_every_declared_metric_has_a_group_and_its_mlflow_key_reads_back():
    from dkilab.eval.scoring import METRICS, base
    from dkilab.eval.tracking.runs import metric_key
    from dkilab.eval.tracking.store_uri import METRIC_GROUPS, metric_name

    bare = {n for n, m in METRICS.items() if not m.group}
    assert bare == {"questions", "errors"}  # counts: the Model metrics section, last
    assert {m.group for m in METRICS.values()} - {""} <= set(METRIC_GROUPS)
    for name in [*METRICS, "fact_call_rate_ci95_low", "score_ci95_high", "kv_cache_bytes"]:
        assert metric_name(metric_key(name)) == name
    assert metric_key("final_call") == "fact/final_call"
    assert metric_key("score_ci95_low") == "uncertainty/score_ci95_low"
    assert metric_name("score/recall_v4_fixtures") == "score/recall_v4_fixtures"  # an old parent key is left alone
    with pytest.raises(ValueError, match="group 'facts' is not one of agent, answers"):
        base.Metric("x", "x", group="facts")  # a typo is refused when declared, not when a cell logs it
