"""Abstention-detector benchmark: precision, recall and F1 per language on one half of the labelled
phrasings (`datasets/fixtures/abstention/phrasings.jsonl`; `test` is the held-out half, `dev` the one
the rules were tuned on), for the structural rules and, with `--judge MODEL`, an LLM judge.

    dkilab bench abstention [--split test|dev] [--judge offline:smollm2] [--errors]
"""
from __future__ import annotations

from collections import Counter


def _print(name: str, figures: dict, rows: list[dict], show_errors: bool) -> None:
    by_id = {r["id"]: r for r in rows}
    for lang, m in figures.items():
        print(f"  {name:28s} {lang}: precision {m['precision']:.3f}  recall {m['recall']:.3f}  F1 {m['f1']:.3f}  "
              f"(n={int(m['n'])}, errors {len(m['errors'])})")
        if show_errors:
            for e in m["errors"]:
                r = by_id[e]
                print(f"      {'missed' if r['abstains'] else 'false '} [{r['kind']}] {r['text']}")


def main(split: str = "test", judge: str | None = None, show_errors: bool = False) -> int:
    from dkilab.eval.metrics.abstention import DETECTOR, evaluate_detector, load_phrasings

    rows = load_phrasings()
    part = [r for r in rows if r["split"] == split]
    kinds = Counter((r["lang"], r["kind"]) for r in part)
    print(f"labelled phrasings, {split} half: {len(part)} ("
          + ", ".join(f"{lang} {kind} {n}" for (lang, kind), n in sorted(kinds.items())) + ")")
    _print(f"{DETECTOR.name}-v{DETECTOR.version} (rules)", evaluate_detector(DETECTOR.is_abstention, split, rows),
           rows, show_errors)
    if judge:
        from dkilab.eval.metrics.judge import LLMJudge
        from dkilab.models import load_model

        llm = LLMJudge(load_model(judge), abstention=True)
        unparsed = []

        def decide(text: str) -> bool:
            label, _ = llm.abstains("(the question is not shown)", text)
            if label is None:
                unparsed.append(text)
                return DETECTOR.is_abstention(text)
            return label

        figures = evaluate_detector(decide, split, rows)
        _print(f"llm-judge {judge}", figures, rows, show_errors)
        print(f"  judge replies naming neither label (the rules decided): {len(unparsed)} of {len(part)}")
        if split == "test":  # experiments that use this judge for abstention log these figures
            from dkilab.eval.metrics.abstention import save_judge_card
            from dkilab.eval.metrics.judge import ABSTENTION_PROMPT

            save_judge_card(judge, ABSTENTION_PROMPT, figures)
    return 0
