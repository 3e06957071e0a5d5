"""The reply-shapes check set (issue 61): at least 300 replies per language in the five shapes, each written to
its label, a third held back, never read by the detector's trainer, rebuilt byte for byte by its script."""
import importlib.util
import json
from collections import Counter

import pytest
from dkilab.bench import abstention_shapes as shapes
from dkilab.bench.abstention_train import load_sources

QUOTED = ["You didn't say the exact day, but you mentioned the trip was in early March.",
          "不用担心，你的血型是O型阴性，你献血之后提到过。"]
LABEL = {"long_decline": (True, "abstain"), "decline_offer": (True, "abstain"), "concessive_answer": (False, "answer"),
         "guess_after_decline": (False, "hedged_guess"), "yes_no_answer": (False, "answer")}


def test_the_set_is_what_its_script_writes_with_its_labels_by_shape():
    spec = importlib.util.spec_from_file_location("reply_shapes", shapes.SHAPES.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = module.build()
    on_disk = shapes.load("all")
    assert [json.dumps(r, ensure_ascii=False) for r in built] == [json.dumps(r, ensure_ascii=False) for r in on_disk]
    per_lang = Counter(r["lang"] for r in on_disk)
    assert per_lang["en"] >= 300 and per_lang["zh"] >= 300
    assert {(r["lang"], r["shape"]) for r in on_disk} == {(lang, s) for lang in ("en", "zh") for s in LABEL}
    assert all((r["abstains"], r["kind"]) == LABEL[r["shape"]] for r in on_disk)
    assert len({r["text"] for r in on_disk}) == len(on_disk) and not set(QUOTED) & {r["text"] for r in on_disk}
    held = Counter((r["lang"], r["shape"]) for r in shapes.load())
    assert set(held.values()) == {22}  # a third of 66 per shape and language
    assert not {r["id"] for r in on_disk} & {r["id"] for r in load_sources()}  # never fitted on


def test_figures_count_precision_recall_and_hedged_guesses():
    rows = [{"lang": "en", "text": t, "abstains": a, "shape": s, "kind": k} for t, a, s, k in [
        ("I don't know.", True, "long_decline", "abstain"), ("Blue.", False, "yes_no_answer", "answer"),
        ("No idea, maybe blue?", False, "guess_after_decline", "hedged_guess"),
        ("Not sure, perhaps red.", False, "guess_after_decline", "hedged_guess")]]
    calls = {"I don't know.": True, "Blue.": False, "No idea, maybe blue?": True, "Not sure, perhaps red.": False}
    m = shapes.figures(rows, calls.__getitem__)["en"]
    assert (m["precision"], m["recall"], m["hedged_guess_answers"]) == (0.5, 1.0, 0.5)
    assert m["shapes"]["guess_after_decline"] == (1, 2)


# --- issue 61: the clause-level decision, written here (not from the check set) in the five shapes --------------
SHAPED = {
    "long_decline": ["I looked back through our conversations and there's nothing about your cousin's wedding. I'd "
                     "rather not invent a date, so I can't tell you.",
                     "我翻了翻之前的聊天，没找到你表姐婚礼的日期。我不想瞎猜，所以没法告诉你。"],
    "decline_offer": ["You haven't told me your landlord's name yet. If you share it, I'll remember it for next time.",
                      "你还没告诉过我房东叫什么。你说一下的话，我会记住的。"],
    "concessive_answer": ["You never said what time the ferry left, but you mentioned you sailed to Capri on a "
                          "Tuesday.",
                          "Not the blue one: you bought the green jacket, as you told me last week.",
                          "你没说渡轮几点开，不过你提到过你是周二坐船去的卡普里。",
                          "不用担心，你的航班在周五下午，你上次订票的时候说过。"],
    "guess_after_decline": ["I don't think you ever told me your cat's name. If I had to guess, I'd say Mochi.",
                            "你没提过你猫的名字，我只能猜：可能是麻薯？"],
    "yes_no_answer": ["No, the concert wasn't postponed. You said it went ahead on Sunday.",
                      "没有，演唱会没延期。你说周日照常开了。"],
}


def test_the_five_shapes_in_both_languages_and_the_quoted_replies_are_decided_by_what_they_commit_to():
    from dkilab.eval.scoring.abstention import get_detector
    from dkilab.text.abstention.commit import commitment

    hybrid = get_detector("hybrid")
    for shape, texts in SHAPED.items():
        abstains, kind = LABEL[shape]
        for text in texts:
            assert hybrid.is_abstention(text) is abstains, text
            assert hybrid.kind(text) == kind, text
    for text in QUOTED:  # issue 61's two replies: committed answers, and the rules are sure of it
        assert commitment(text) == "answer" and hybrid.decide(text) == (False, "rules"), text
    # a guess with no decline before it is a plain (hedged) answer; a decline with no value stays with the other rules
    assert commitment("Probably Mochi, I think.") == "answer"
    assert commitment("I don't think you ever told me your sister's name.") is None
    assert commitment("你提到的那个物业经理，我对他一无所知。") is None  # a topic, then a decline: no value


def test_the_commitment_rule_turns_no_labelled_abstention_into_an_answer():
    """Rules version 14 runs before every other rule: on every labelled, fresh-check and held-back abstention it must
    find no value."""
    from dkilab.bench.abstention_train import load_fresh_check, load_held_back
    from dkilab.text.abstention.commit import commitment

    rows = [r for r in load_sources() + load_fresh_check() + load_held_back() if r["abstains"]]
    assert len(rows) > 1500 and [r["text"] for r in rows if commitment(r["text"])] == []


def test_the_held_back_third_reaches_the_issue_target_in_each_language():
    from dkilab.eval.scoring.abstention import get_detector

    hybrid = get_detector("hybrid")
    rows = shapes.load()
    assert {r["split"] for r in rows} == {"held_back"}
    fit_words = {r["text"] for r in shapes.load("fit")}
    assert not fit_words & {r["text"] for r in rows}
    hybrid.decide_many([r["text"] for r in rows])
    for lang, m in shapes.figures(rows, hybrid.is_abstention, hybrid.kind).items():
        assert m["precision"] >= 0.98 and m["recall"] >= 0.98, (lang, m)
        assert m["hedged_guess_answers"] == 1.0 and m["hedged_guess_kind"] >= 0.9, (lang, m)


def test_hedged_guesses_count_as_hallucinations_and_are_reported_apart():
    from dkilab.eval.scoring import aggregate, score_answer
    from dkilab.types import Answer, QAItem

    unanswerable = QAItem("What is my cat called?", None, answerable=False, qid="q1")
    answerable = QAItem("What is my cat called?", "Mochi", answerable=True, qid="q2")
    texts = ["I don't think you ever told me your cat's name. If I had to guess, I'd say Mochi.",
             "I don't think you ever told me your cat's name.", "Your cat is called Mochi."]
    rows = [score_answer(unanswerable, Answer(t)) for t in texts]
    assert [r["hallucinated"] for r in rows] == [1.0, 0.0, 1.0]
    assert [r["hedged_guess"] for r in rows] == [1.0, 0.0, 0.0]
    agg = aggregate(rows + [score_answer(answerable, Answer(texts[0]))])  # answerable questions do not count
    assert agg["hedged_guess_rate"] == pytest.approx(1 / 3) and agg["hallucination_rate"] == pytest.approx(2 / 3)


def test_the_llm_judge_is_measured_on_the_same_held_back_rows(tmp_path, capsys):
    """A scripted judge that behaves like a small real one: it labels most replies right, calls every hedged guess a
    decline, and once names neither label (the hybrid detector decides that one, as in an experiment)."""
    import yaml
    from dkilab.cli import main

    rows = shapes.load()
    answers = []
    for i, r in enumerate(rows):
        label = "DECLINES" if r["abstains"] or r["kind"] == "hedged_guess" else "ANSWERS"
        answers.append({"match": r["text"], "outputs": ["Hmm, hard to say." if i == 0 else f"{label}."]})
    script = tmp_path / "judge.yaml"
    script.write_text(yaml.safe_dump({"answers": answers, "default": "ANSWERS"}, allow_unicode=True), encoding="utf-8")
    assert main(["bench", "abstention", "--shapes", "--judge", f"scripted:{script}"]) == 0
    out = capsys.readouterr().out
    guesses = {lang: sum(r["kind"] == "hedged_guess" and r["lang"] == lang for r in rows) for lang in ("en", "zh")}
    for lang in ("en", "zh"):
        gold = sum(r["abstains"] and r["lang"] == lang for r in rows)
        assert (f"llm-judge scripted:{script} {lang}: precision {gold / (gold + guesses[lang]):.3f} recall 1.000"
                in out), out
    assert "hedged guesses decided as answers 0.000" in out
    assert "judge replies naming neither label (the hybrid detector decided): 1 of 220" in out
