"""The judge stress probes, built by rule from the gold alone: a vague answer of the gold's type with no
specifics, the gold with its specifics changed, and the gold framed as a reply; the row fields read a judge's
verdicts as false accepts and false rejects, and a judge accepting over 10% of vague answers is flagged."""
import re

import pytest
from dkilab.eval.scoring import judge_stress as js
from dkilab.types import QAItem


@pytest.mark.parametrize("gold, kind", [("7 May 2023", "date"), ("last week", "date"), ("3", "number"),
                                        ("Twice", "number"), ("her sister Ana", "person"), ("to Paris", "place"),
                                        ("green tea", "other"), ("Single", "other"), ("Rome", "other"),
                                        ("上周三", "date"), ("一位同事", "person"), ("浅色橡木", "other")])
def test_the_answer_type_is_read_from_the_gold(gold, kind):
    """Where the question says nothing: a capitalised word alone is no person ("Single", "Rome")."""
    assert js.answer_type(gold) == kind


@pytest.mark.parametrize("question, kind", [("When did she move?", "date"), ("How many kids does he have?", "number"),
                                            ("Who did she meet?", "person"), ("Where did they go?", "place"),
                                            ("What is her status?", "other"), ("她什么时候搬家的？", "date"),
                                            ("他养了几只猫？", "other"), ("她和谁一起去的？", "person")])
def test_the_answer_type_is_what_the_question_asks_for(question, kind):
    assert js.answer_type("Caroline", question) == kind


# (question, gold, the wrong probe, the paraphrase's reply or None where no rule rewords the gold)
CASES = [
    ("When did Ana move?", "7 May 2023", "7 October 2020", "May 7, 2023"),
    ("When did Ana move?", "June 3, 2022", "November 3, 2019", "3 June 2022"),
    ("How many kids?", "3", "10", "three"),
    ("How often did he go?", "Twice", "Three times", None),
    ("Who visited her?", "Caroline", None, None),
    ("Who visited her?", "her sister", "her brother", None),
    ("Where did they go?", "Rome", None, None),
    ("Where are they going?", "a new city", "nowhere, they stayed at home", None),  # no place named: none allowed
    ("Who came with her?", "her friends from church", "no one, they did it alone", None),
    ("Who is his favourite player?", "LeBron James", None, None),  # the whole name replaced
    ("When did she get it?", "A few years ago", "A few weeks ago", None),
    ("What game is he playing?", "Cyberpunk 2077", None, None),  # a title, not a date
    ("What does she think of it?", "she thinks he will be an awesome dad", None, None),
    ("Where did they go?", "to Paris", "to ", None),
    ("Would he like it?", "Likely no", "Likely yes", None),
    ("Is he vegetarian?", "No", "Yes", "No, that's not the case"),
    ("What is her hobby?", "Writing a travel blog", None, None),
    ("What did she buy?", "apples, pears and plums", None, "plums, pears and apples"),
    ("Which teas?", "sencha or genmaicha", None, "genmaicha or sencha"),
    ("她什么时候去的？", "周一", "周四", None),
    ("她喜欢什么木头？", "浅色橡木", "一家在苏州新开的面包店", None),
    ("How much is the rent?", "1,450 euros a month", "1,457 euros a month", None),
    ("When did he win?", "the week before 21 January, 2022", "the week before 21 June, 2019",
     "the week before January 21, 2022"),  # a date's comma is no list
    ("Why turtles?", "They make him feel calm and don't require much looking after", None, None),  # clauses: kept
    ("What lighting?", "red and purple lighting", None, None),  # a shared word: no list
    ("What does she love?", "Love for writing and reading", None, None),
    ("What book?", '"Harry Potter and the Philosopher\'s Stone"', None, None),  # a title
    ("What does he find rewarding?", "Seeing their growth, improvement, and confidence", None, None),  # a shared head
    ("Is she religious?", "Somewhat, but not extremely religious", None, None),
    ("What did they do?", "explored nature, roasted marshmallows, and went on a hike", None,
     "went on a hike, roasted marshmallows and explored nature"),
    ("What does she want?", "creating a family for kids who need one", None, None),  # "one", a pronoun
    ("How long?", "married for 5 years", "married for 12 years", "married for five years"),
    ("What console?", 'A Switch, since "Xenoblade 2" is made for it', None, None),  # a title's number
    ("Where?", "Edinburgh, Scotland", None, None),  # one place
    ("What did he gain?", "More energy, gains in strength and endurance", None, None),
]


@pytest.mark.parametrize("question, gold, wrong, paraphrase", CASES)
def test_each_probe_is_what_its_name_says(question, gold, wrong, paraphrase):
    """A wrong probe changes the value asked for and only that; a paraphrase rewords (never the gold verbatim);
    a vague probe has no specifics."""
    p = js.probes(QAItem(question, gold, qid="q1"), gold)
    assert p == js.probes(QAItem(question, gold, qid="q1"), gold)  # deterministic
    assert p["wrong"] != gold and p.get("vague") != gold
    vague = re.sub(r"^sometime in (\d{4})$", lambda m: "" if m.group(1) in gold and js._MONTH.search(gold) else m[0],
                   p.get("vague", ""))
    assert not re.search(r"\d", vague), p  # no specifics (a date's year alone where the gold has its month)
    if wrong is not None:
        assert p["wrong"].startswith(wrong), p
    else:  # a specific answer of the kind asked, sharing no word with the gold
        words = [{w.lower() for w in re.findall(r"\w+", t)} - js._NOT_NAMES for t in (gold, p["wrong"])]
        assert not words[0] & words[1], p
    if paraphrase is None:
        assert "paraphrase" not in p
    else:
        assert p["paraphrase"] in (f"As far as I remember, {paraphrase}.", f"我记得是{paraphrase}。")
        assert p["paraphrase"] not in (f"As far as I remember, {gold}.", f"我记得是{gold}。")


@pytest.mark.parametrize("question, vague", [("What kind of art does Caroline make?", "some kind of art"),
                                             ("Which book is Jon reading?", "a certain book"),
                                             ("What instruments does Tim play?", "some instruments")])
def test_a_vague_probe_stays_on_the_questions_topic(question, vague):
    assert js.probes(QAItem(question, "abstract art", qid="q1"), "abstract art")["vague"] == vague


@pytest.mark.parametrize("gold, vague", [("7 May 2023", "sometime in 2023"),
                                         ("The week before 9 June 2023", "sometime in 2023"),
                                         ("The weekend after 3June, 2022.", "sometime in 2022"),
                                         ("2022", "a while ago"), ("between 2019 and 2021", "a while ago")])
def test_a_vague_date_keeps_only_a_year_and_only_where_the_gold_says_more(gold, vague):
    """A bare year gets no "sometime last year": asked in 2023, that is the gold 2022."""
    assert js.probes(QAItem("When did she go?", gold, qid="q1"), gold)["vague"] == vague


def test_a_gold_that_is_itself_vague_gets_no_vague_probe():
    assert "vague" not in js.probes(QAItem("How many?", "a few", qid="q1"), "a few")


def test_verdicts_become_false_accepts_and_rejects_and_unclear_ones_count_nowhere():
    assert js.row_fields({"vague": 1.0, "wrong": 0.0, "paraphrase": 0.0}) == {
        "stress_vague_accepted": 1.0, "stress_wrong_accepted": 0.0, "stress_paraphrase_rejected": 1.0}
    assert js.row_fields({"vague": None, "wrong": 1.0, "paraphrase": 1.0}) == {
        "stress_wrong_accepted": 1.0, "stress_paraphrase_rejected": 0.0}
    assert js.flags({"judge_accepts_vague": 0.1}) == [] and js.flags({}) == []
    assert "accepted 25% of vague-but-wrong" in js.flags({"judge_accepts_vague": 0.25})[0]


def test_the_judge_generates_the_probes_with_the_answers_in_one_batch(tmp_path):
    """The probe prompts are in the batch the judge generates before scoring, so probing adds no one-by-one calls."""
    from dkilab.eval.scoring.judge import LLMJudge
    from dkilab.eval.scoring.scorers import JudgeScorer
    from dkilab.types import Answer

    item = QAItem("When did Ana move?", "7 May 2023", qid="q1")
    judge = LLMJudge(model=None, stress=True)  # type: ignore[arg-type]
    texts = JudgeScorer(judge).texts([(item, Answer("In May.", strategy="s"))])
    probes = js.probes(item, "7 May 2023").values()
    assert len(texts) == 4 and all(any(p in t for t in texts) for p in probes)
    texts = JudgeScorer(LLMJudge(model=None)).texts([(item, Answer("In May.", strategy="s"))])  # type: ignore[arg-type]
    assert len(texts) == 1
