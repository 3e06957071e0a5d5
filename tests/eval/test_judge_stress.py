"""The judge stress probes, built by rule from the gold alone: a vague answer of the gold's type with no
specifics, the gold with its specifics changed, and the gold framed as a reply; the row fields read a judge's
verdicts as false accepts and false rejects, and a judge accepting over 10% of vague answers is flagged."""
import re

import pytest

from dkilab.eval.metrics import judge_stress as js
from dkilab.types import QAItem


@pytest.mark.parametrize("gold, kind", [("7 May 2023", "date"), ("last week", "date"), ("3", "number"),
                                        ("her sister Ana", "person"), ("Caroline", "person"), ("to Paris", "place"),
                                        ("green tea", "other"), ("上周三", "date"), ("一位同事", "person"),
                                        ("浅色橡木", "other")])
def test_the_answer_type_is_read_from_the_gold(gold, kind):
    assert js.answer_type(gold) == kind


@pytest.mark.parametrize("gold", ["7 May 2023", "3", "Caroline", "to Paris", "green tea", "No, Tom became vegetarian",
                                  "周一", "浅色橡木", "G1373", "1,450 euros a month"])
def test_each_probe_is_what_its_name_says(gold):
    p = js.probes(QAItem("What?", gold, qid="q1"), gold)
    assert set(p) == set(js.KINDS)
    assert gold in p["paraphrase"] and p["paraphrase"] != gold  # the gold, whole, framed
    assert p["wrong"] != gold and p["vague"] != gold and not re.search(r"\d", p["vague"])  # no specifics
    assert p == js.probes(QAItem("What?", gold, qid="q1"), gold)  # deterministic
    if re.search(r"\d", gold):
        assert re.search(r"\d", p["wrong"])  # still specific: another number, year or month


def test_verdicts_become_false_accepts_and_rejects_and_unclear_ones_count_nowhere():
    assert js.row_fields({"vague": 1.0, "wrong": 0.0, "paraphrase": 0.0}) == {
        "stress_vague_accepted": 1.0, "stress_wrong_accepted": 0.0, "stress_paraphrase_rejected": 1.0}
    assert js.row_fields({"vague": None, "wrong": 1.0, "paraphrase": 1.0}) == {
        "stress_wrong_accepted": 1.0, "stress_paraphrase_rejected": 0.0}
    assert js.flags({"judge_accepts_vague": 0.1}) == [] and js.flags({}) == []
    assert "accepted 25% of vague-but-wrong" in js.flags({"judge_accepts_vague": 0.25})[0]


def test_the_judge_generates_the_probes_with_the_answers_in_one_batch(tmp_path):
    """The probe prompts are in the batch the judge generates before scoring, so probing adds no one-by-one calls."""
    from dkilab.eval.cell import judge_texts
    from dkilab.eval.metrics.judge import LLMJudge
    from dkilab.types import Answer

    item = QAItem("When did Ana move?", "7 May 2023", qid="q1")
    judge = LLMJudge(model=None, stress=True)  # type: ignore[arg-type]
    texts = judge_texts(judge, [(0, Answer("In May.", strategy="s"), None)], [(None, item)])
    probes = js.probes(item, "7 May 2023").values()
    assert len(texts) == 4 and all(any(p in t for t in texts) for p in probes)
    texts = judge_texts(LLMJudge(model=None), [(0, Answer("In May.", strategy="s"), None)], [(None, item)])  # type: ignore[arg-type]
    assert len(texts) == 1
