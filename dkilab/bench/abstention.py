"""Abstention-detector benchmark: on every labelled source of `datasets/fixtures/abstention/`
(the hand-written phrasings and the templated sources), the rules alone and the hybrid detector, the
latter validated leave-one-source-out (each source predicted by a model trained on the others) beside a
pooled 5-fold split; the figures per held-out source; the quoted probe phrasings and the fresh check
(both never trained on);
and, with `--judge MODEL`, an LLM judge on a per-source sample. `--train` refits the shipped weights.

    dkilab bench abstention [--train] [--judge offline:smollm2 [--judge-per-source 4]] [--errors]
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

from dkilab.bench import abstention_external as ext
from dkilab.bench.abstention_train import (
    _figures,
    fresh_figures,
    held_back_figures,
    load_fresh_check,
    load_held_back,
    load_sources,
    validate,
)
from dkilab.bench.abstention_train import train as fit
from dkilab.eval.scoring.abstention import (
    DETECTOR,
    detector_card,
    evaluate_detector,
    get_detector,
    load_phrasings,
    save_judge_card,
)
from dkilab.eval.scoring.judge import ABSTENTION_PROMPT, LLMJudge
from dkilab.models import load_model
from dkilab.text.abstention import learned

PROBES = [  # misses and false alarms of structural-v2 on phrasings written outside the project
    ("I have no record of that.", True), ("This isn't something you've told me.", True),
    ("I lack the details to answer that.", True), ("Not something we talked about.", True),
    ("Unknown Pleasures by Joy Division.", False), ("不清楚的地方她都问了客户经理。", False),
]


def _line(name: str, figures: dict) -> None:
    print(f"  {name:34s} " + "  ".join(f"{lang}: precision {m['precision']:.3f} recall {m['recall']:.3f} (n={m['n']})"
                                       for lang, m in figures.items()))


def _sample(rows: list[dict], per_source: int) -> list[dict]:
    """`per_source` rows of every source in each of its languages, abstentions and answers alternating."""
    out: list[dict] = []
    taken: Counter[tuple[str, str]] = Counter()
    ordered = sorted(rows, key=lambda r: (r["source"], r["lang"], r["id"]))
    for want in (True, False):
        for r in ordered:
            key = (r["source"], r["lang"])
            if r["abstains"] is want and taken[key] < ((per_source + 1) // 2 if want else per_source):
                taken[key] += 1
                out.append(r)
    for r in ordered:  # a source of one class only: fill up from it
        key = (r["source"], r["lang"])
        if taken[key] < per_source and r not in out:
            taken[key] += 1
            out.append(r)
    return out


def main(split: str = "test", judge: str | None = None, show_errors: bool = False, train: bool = False,
         judge_per_source: int = 4, external: bool = False, data_dir=None, second_reader=None) -> int:
    rows = load_sources()
    sources = Counter(r["source"] for r in rows)
    print(f"labelled phrasings: {len(rows)} from {len(sources)} sources ("
          + ", ".join(f"{s} {n}" for s, n in sorted(sources.items())) + ")")
    v = fit() if train else validate(rows)
    if train:
        get_detector.cache_clear()

        learned.load_weights.cache_clear()

        detector_card.cache_clear()
        sel = v["selection"]
        print(f"  chosen on the dev sources' leave-one-source-out figures ({sel['dev_rows']} rows; the highest minimum "
              f"of precision and recall per language): C={sel['C']:g}, threshold {sel['threshold']:g}; the grid:")
        for g in sel["grid"]:
            print(f"    C={g['C']:<4g} threshold {g['threshold']:<5g} dev minimum {g['dev_min']:.4f}  " + "  ".join(
                f"{lang} P {m['precision']:.3f} R {m['recall']:.3f}" for lang, m in g["dev"].items()))
        print("  weights written to dkilab/text/abstention/lr.json")
    hybrid = get_detector("hybrid")
    _line(f"{DETECTOR.name}-v{DETECTOR.version} (rules), all rows", v["rules"])
    _line(f"{hybrid.name}-v{hybrid.version}, leave-one-source-out", v["leave_one_source_out"])
    _line(f"{hybrid.name}-v{hybrid.version}, pooled 5-fold", v["pooled_5fold"])
    print("  per held-out source (accuracy: rules | hybrid trained without it):")
    for s, m in v["per_source"].items():
        print(f"    {s:36s} n={m['n']:4d}  {m['rules_accuracy']:.3f} | {m['accuracy']:.3f}")
    hand = load_phrasings()
    _line(f"{DETECTOR.name}-v{DETECTOR.version}, hand-written {split} half",
          {k: {**m, "n": int(m["n"])} for k, m in evaluate_detector(DETECTOR.is_abstention, split, hand).items()})
    print("  issue 33's quoted phrasings (never trained on), hybrid:")
    for text, gold in PROBES:
        got, path = hybrid.decide(text)
        print(f"    {'ok   ' if got == gold else 'WRONG'} {'abstains' if got else 'answers '} ({path}) {text}")
    _fresh(hybrid, DETECTOR)
    _held_back(hybrid, DETECTOR)
    if external or second_reader:
        if not _external(hybrid, DETECTOR, data_dir, show_errors, second_reader):
            return 2
    if show_errors:
        by_id = {r["id"]: r for r in rows}
        print("  leave-one-source-out errors:")
        for i in v["errors_loso"]:
            r = by_id[i]
            print(f"    {'missed' if r['abstains'] else 'false '} [{r['source']}] {r['text']}")
    if judge:
        _judge(judge, _sample(rows, judge_per_source), hybrid)
    return 0


FRESH_ROUNDS = {  # what each round of the fresh check is (datasets/fixtures/abstention/fresh_check.jsonl)
    2: "written after the rules-2 detector was frozen; one rule (an embedded question, then \"I don't know\") was "
       "added after seeing its three misses",
    3: "written after that rule; commit 65de50f scores it en 1.000 / 0.950, zh 1.000 / 0.900; the rules-3 rule "
       "(Chinese \"cannot say\": 说不出来, 判断不出来) was added after seeing two of its misses",
    4: "written after rules 3 were frozen; commit d93f7db scores it en 1.000 / 0.950, zh 1.000 / 0.950; the rules-4 "
       "idiom rule (\"drawing a blank\", \"doesn't ring a bell\", 毫无头绪, ...) was written after seeing its two "
       "misses and the labelled sources' leave-one-source-out misses",
    5: "written after rules 4 were frozen; the rules-4 detector (`git checkout dfce279 -- dkilab/text`) scores it en "
       "0.947 / 0.900, zh 0.905 / 0.950; rules 5 (a person in the story as an idiom's subject, the user's report of "
       "someone else, \"escapes me\", \"got nothing on\") were written after seeing its misses",
    6: "written after rules 5 were frozen; the rules-5 detector (`git checkout 638bb15 -- dkilab/text`) scores it en "
       "1.000 / 0.800, zh 1.000 / 0.850; rules 6 (\"the first I'm hearing of\", \"I can't speak to / vouch for / "
       "confirm\", 第一次听说, 没法替你回答, 推断不出) were written after seeing its misses",
    7: "written after rules 6 were frozen; the rules-6 detector (`git checkout faa8369 -- dkilab/text`) scores it en "
       "0.941 / 0.800, zh 1.000 / 0.900; its misses on new subjects were followed by 60 template subjects per language "
       "instead of 16 (none from the fresh check) and rules 7",
    8: "written after rules 7 and the 60-subject templates were frozen (commit 965b10e) and measured once: en 0.905 / "
       "1.000, zh 0.909 / 1.000; one row found to repeat a labelled phrasing was dropped after; rules 8 (what a person "
       "of the user's life, named by a noun, did not do; what the user told someone else; trades as people) were "
       "written after seeing its four false alarms",
    9: "written after rules 8 were frozen (commit 62ffb53) and measured once: en 1.000 / 1.000, zh 1.000 / 1.000; the "
       "rules-7 detector (`git checkout 31af791 -- dkilab/text`) scores it en 0.952 / 1.000, zh 0.952 / 1.000. Its two "
       "false alarms are the two rows written as paraphrases of round 8's false alarms, by the author who wrote rules "
       "8. Rules 9 and the sources templated:absent_person and hard:person_did_not (added to the dev sources) came "
       "after, from holes in rules 8 found by reading them, not from round 9's rows (it had no error)",
    10: "written after rules 9 and the two person sources were frozen (commit 59855a5) and measured once: en 0.895 / "
        "0.850, zh 0.864 / 0.950 (the rules-8 detector, `git checkout eb3a459 -- dkilab/text`: en 0.889 / 0.800, zh "
        "0.826 / 0.950); rules 10 (ways of saying something is missing with no negation, any recipient after \"tell\", "
        "the answerer making it up, X的人 as a person, 后来 as a contrast) were written after seeing its errors",
    11: "written after rules 10 were frozen (commit 1fc9180) and measured once: en 0.944 / 0.850, zh 0.950 / 0.950; "
        "the rules-9 detector (`git checkout 59855a5 -- dkilab/text`) scores it the same; nothing was changed after it",
}


EXTERNAL_HISTORY = (  # the check on replies written by other people: every measurement of its held-out part
    "1. with the detector of commit 7bbaa43 (rules 10), before any rule was read from it: hybrid held-out en precision "
    "0.021 recall 0.500 (2 abstentions; 47 false alarms among 124 answers), zh 0.629 / 0.846 (dev: en 42 errors, zh "
    "0.479 / 0.885)",
    "2. with the detector of commit aaef027 (rules 11 and hard:partial_answer, written from the dev part's errors "
    "only), measured once: held-out en 0.043 / 0.500 (22 false alarms among 124 answers), zh 0.800 / 0.769 (dev: en 21 "
    "errors, zh 0.710 / 0.846)",
    "3. with the detector of commit 1799b57 (rules 12, written from the English dev part's errors only, and the "
    "learned part refitted to its optimum: C=30), measured once: held-out en 0.125 / 0.500 (7 false alarms among 124 "
    "answers), zh 0.826 / 0.731 (dev: en 9 errors, zh 0.710 / 0.846)",
    "4. with the detector of commit 67d05a9 (rules 13, written from the Chinese dev part's errors only; the refit kept "
    "every coefficient), measured once: held-out en 0.125 / 0.500 (unchanged), zh 0.880 / 0.846 (dev: en 9 errors, zh "
    "0.862 / 0.962)",
    "5. the same rules, the learned part refitted without SmolLM2's 106 quickstart replies (held back: the quickstart "
    "reads its hallucination_rate from such replies): held-out en 0.062 / 0.500 (15 false alarms among 124 answers), "
    "zh 0.786 / 0.846 (dev: en 10 errors, zh 0.862 / 0.962); those replies were the only real model output it had "
    "learned from",
    "6. with rules 14 (a reply that commits to a value answers; written from the reply-shapes check set, not from this "
    "check) and the refit under them, measured once: held-out en 0.067 / 0.500 (14 false alarms among 124 answers), "
    "zh 0.815 / 0.846 (5 false alarms; dev: en 9 errors, zh 0.862 / 0.962)")


def _external(hybrid, structural, data_dir, show_errors: bool, second_reader=None) -> bool:
    """The check on replies written by other people (`abstention_external`): per part and language; with
    `show_errors`, the dev part's errors (the held-out part's are counted, never listed); with `second_reader`
    (another reader's label file), the two readers' agreement and the figures under the second reader's labels."""
    where = data_dir or os.environ.get("DKILAB_DATA_DIR")
    if not where:
        print("external check: no data dir (--data-dir or $DKILAB_DATA_DIR): it reads KdConv and LoCoMo from there",
              file=sys.stderr)
        return False
    try:
        rows = ext.load(where, ext.LABELS)
        theirs = ext.load(where, Path(second_reader)) if second_reader else None
    except (ValueError, OSError) as exc:  # labels of another text, a missing label or file: named, exit 2
        print(f"external check: {exc}", file=sys.stderr)
        return False
    kinds = Counter(r["label"] for r in rows)
    print(f"  external check ({len(rows)} replies to questions written by other people, KdConv zh and LoCoMo en; "
          + ", ".join(f"{k} {kinds[k]}" for k in ext.KINDS) + "):")
    for line in EXTERNAL_HISTORY:
        print(f"    ({line})")
    for name, det in (("hybrid", hybrid), ("rules alone", structural)):
        for part, by in ext.figures(det.is_abstention, rows).items():
            for lang, m in by.items():
                print(f"    {name:11s} {part:8s} {lang}: precision {m['precision']:.3f} recall {m['recall']:.3f} "
                      f"(n={m['n']}, abstentions {m['abstain']}, errors {len(m['errors'])}; pivots called abstentions "
                      f"{m['pivots_abstain']} of {m['pivots']})")
    if theirs is not None:
        print(f"  second reader ({second_reader}) against the shipped labels, all four kinds and abstain/answer only:")
        for part, a in ext.agreement(rows, theirs).items():
            top = ", ".join(f"{k} {n}" for k, n in a["confusion"].most_common(4)) or "none"
            print(f"    {part:8s} n={a['n']:3d}  agreement {a['agree']:.3f}  kappa {a['kappa']:.3f}  abstain/answer "
                  f"n={a['n_binary']} kappa {a['kappa_binary']:.3f}  (disagreements, first reader->second: {top})")
        for name, det in (("hybrid", hybrid), ("rules alone", structural)):
            for part, by in ext.figures(det.is_abstention, theirs).items():
                for lang, m in by.items():
                    print(f"    {name:11s} {part:8s} {lang}, second reader's labels: precision {m['precision']:.3f} "
                          f"recall {m['recall']:.3f} (n={m['n']}, abstentions {m['abstain']})")
    if show_errors:
        print("  external check, dev part errors (hybrid):")
        for lang, m in ext.figures(hybrid.is_abstention, rows)["dev"].items():
            for r in m["errors"]:
                print(f"    {'missed' if r['label'] == 'abstain' else 'false '} [{r['key']}] {r['text'][:160]}")
    return True


def _fresh(hybrid, structural) -> None:
    """The fresh check per round: phrasings never trained or tuned on (see FRESH_ROUNDS)."""
    rows = load_fresh_check()
    print(f"  fresh check ({len(rows)} phrasings never trained on; by round):")
    got = {name: fresh_figures(det, rows) for name, det in (("hybrid", hybrid), ("rules", structural))}
    for part in got["hybrid"]:
        rnd = int(part.split()[1]) if part.startswith("round") else None
        _line(f"hybrid, {part}", got["hybrid"][part])
        _line(f"rules alone, {part}", got["rules"][part])
        if rnd in FRESH_ROUNDS:
            print(f"    ({FRESH_ROUNDS[rnd]})")


def _held_back(hybrid, structural) -> None:
    """The quickstart model's own replies, labelled by hand and never trained on (the quickstart's
    hallucination_rate is read from such replies)."""
    rows = load_held_back()
    print(f"  held back: {len(rows)} SmolLM2 replies from quickstart runs (never trained on):")
    _line("hybrid", held_back_figures(hybrid, rows))
    _line("rules alone", held_back_figures(structural, rows))


def _judge(model_spec: str, rows: list[dict], hybrid) -> None:
    """The LLM abstention judge on a per-source sample and on the fresh check, beside the hybrid detector on the
    same rows (on the fresh check neither was trained on them: the fair comparison)."""
    llm = LLMJudge(load_model(model_spec), abstention=True)

    def judged(part: list[dict], detector: list[bool]) -> tuple[list[bool], int]:
        unparsed, pred = 0, []
        for r, fallback in zip(part, detector):
            label, _ = llm.abstains("(the question is not shown)", r["text"])
            if label is None:
                unparsed += 1
                label = fallback
            pred.append(bool(label))
        return pred, unparsed

    fresh = load_fresh_check()
    results = {}
    for name, part in ((f"a sample of the labelled set, {len(rows)} rows (up to a few per source and language; the "
                        "hybrid detector was trained on them)", rows),
                       (f"the fresh check, {len(fresh)} rows (neither was trained on them)", fresh)):
        detector = [d[0] for d in hybrid.decide_many([r["text"] for r in part])]  # one batch, not one encode per row
        pred, unparsed = judged(part, detector)
        results[name] = _figures(part, pred)
        print(f"  LLM judge {model_spec} on {name}:")
        _line(f"llm-judge {model_spec}", results[name])
        _line("hybrid, same rows", _figures(part, detector))
        print(f"  judge replies naming neither label (the hybrid detector decided): {unparsed} of {len(part)}")

    sample, fresh_figures = results.values()
    save_judge_card(model_spec, ABSTENTION_PROMPT, sample, fresh=fresh_figures)  # experiments with this judge log them
