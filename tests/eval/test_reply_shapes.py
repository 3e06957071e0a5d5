"""The reply-shapes check set (issue 61): at least 300 replies per language in the five shapes, each written to
its label, a third held back, never read by the detector's trainer, rebuilt byte for byte by its script."""
import importlib.util
import json
from collections import Counter

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
