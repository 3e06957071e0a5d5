"""Abstention-detector benchmark (issue 33): on every labelled source of `datasets/fixtures/abstention/`
(the hand-written phrasings and the templated sources), the rules alone and the hybrid detector, the
latter validated leave-one-source-out (each source predicted by a model trained on the others) beside a
pooled 5-fold split; the figures per held-out source; the phrasings issue 33 quoted (never trained on);
and, with `--judge MODEL`, an LLM judge on a per-source sample. `--train` refits the shipped weights.

    dkilab bench abstention [--train] [--judge offline:smollm2 [--judge-per-source 4]] [--errors]
"""
from __future__ import annotations

from collections import Counter

PROBES = [  # issue 33: misses and false alarms of structural-v2 on phrasings written outside the project
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
         judge_per_source: int = 4) -> int:
    from dkilab.bench.abstention_train import load_sources, train as fit, validate
    from dkilab.eval.metrics.abstention import DETECTOR, evaluate_detector, get_detector, load_phrasings

    rows = load_sources()
    sources = Counter(r["source"] for r in rows)
    print(f"labelled phrasings: {len(rows)} from {len(sources)} sources ("
          + ", ".join(f"{s} {n}" for s, n in sorted(sources.items())) + ")")
    v = fit() if train else validate(rows)
    if train:
        get_detector.cache_clear()
        from dkilab.text import abstention_learned

        abstention_learned.load_weights.cache_clear()
        from dkilab.eval.metrics.abstention import detector_card

        detector_card.cache_clear()
        print("  weights written to dkilab/text/abstention_lr.json")
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
    if show_errors:
        by_id = {r["id"]: r for r in rows}
        print("  leave-one-source-out errors:")
        for i in v["errors_loso"]:
            r = by_id[i]
            print(f"    {'missed' if r['abstains'] else 'false '} [{r['source']}] {r['text']}")
    if judge:
        _judge(judge, _sample(rows, judge_per_source), hybrid)
    return 0


def _judge(model_spec: str, rows: list[dict], hybrid) -> None:
    """The LLM abstention judge on a per-source sample, beside the hybrid detector on the same rows."""
    from dkilab.bench.abstention_train import _figures
    from dkilab.eval.metrics.judge import LLMJudge
    from dkilab.models import load_model

    llm = LLMJudge(load_model(model_spec), abstention=True)
    unparsed = 0
    pred = []
    for r in rows:
        label, _ = llm.abstains("(the question is not shown)", r["text"])
        if label is None:
            unparsed += 1
            label = hybrid.is_abstention(r["text"])
        pred.append(bool(label))
    print(f"  LLM judge {model_spec} on {len(rows)} rows (up to a few per source and language):")
    _line(f"llm-judge {model_spec}", _figures(rows, pred))
    _line("hybrid, same rows", _figures(rows, [hybrid.is_abstention(r["text"]) for r in rows]))
    print(f"  judge replies naming neither label (the hybrid detector decided): {unparsed} of {len(rows)}")
    from dkilab.eval.metrics.abstention import save_judge_card
    from dkilab.eval.metrics.judge import ABSTENTION_PROMPT

    save_judge_card(model_spec, ABSTENTION_PROMPT, _figures(rows, pred))  # experiments with this judge log them
