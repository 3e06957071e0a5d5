"""The reply-shapes check of the abstention detector (`dkilab bench abstention --shapes`): on the
held-back third of `datasets/fixtures/abstention/reply_shapes.jsonl` (replies in the five shapes 7B-class
models write, each written to its label, never fitted on), precision and recall of abstention per language,
the share decided as labelled per shape, and the share of hedged guesses decided as answers."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from dkilab.config import read_jsonl
from dkilab.eval.scoring.abstention import get_detector
from dkilab.eval.scoring.judge import LLMJudge
from dkilab.models import load_model

SHAPES = Path(__file__).resolve().parents[2] / "datasets" / "fixtures" / "abstention" / "reply_shapes.jsonl"


def load(split: str = "held_back", path: Path = SHAPES) -> list[dict]:
    return [r for r in read_jsonl(path) if split == "all" or r["split"] == split]


def figures(rows: list[dict], is_abstention, kind=None) -> dict:
    """{lang: {precision, recall, n, shapes: {shape: (right, n)}, hedged_guess_answers: share, hedged_guess_kind:
    share}}: `kind(text)` (abstain / answer / hedged_guess), if given, also says which hedged guesses are reported as
    such."""
    out: dict = {}
    by_lang: dict[str, list[tuple[dict, bool]]] = defaultdict(list)
    for r in rows:
        by_lang[r["lang"]].append((r, bool(is_abstention(r["text"]))))
    for lang, pairs in sorted(by_lang.items()):
        tp = sum(1 for r, got in pairs if got and r["abstains"])
        called = sum(1 for _, got in pairs if got)
        gold = sum(1 for r, _ in pairs if r["abstains"])
        shapes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r, got in pairs:
            shapes[r["shape"]][0] += got == r["abstains"]
            shapes[r["shape"]][1] += 1
        guesses = [(r, got) for r, got in pairs if r["kind"] == "hedged_guess"]
        share = (lambda xs: sum(xs) / len(xs) if xs else None)
        out[lang] = {"precision": tp / called if called else 1.0, "recall": tp / gold if gold else 1.0, "n": len(pairs),
                     "shapes": {s: tuple(v) for s, v in sorted(shapes.items())},
                     "hedged_guess_answers": share([not got for _, got in guesses]),
                     "hedged_guess_kind": share([kind(r["text"]) == "hedged_guess" for r, _ in guesses]) if kind
                     else None}
    return out


def _print(name: str, figs: dict) -> None:
    for lang, m in figs.items():
        kind = "" if m["hedged_guess_kind"] is None else f", reported as hedged_guess {m['hedged_guess_kind']:.3f}"
        print(f"  {name} {lang}: precision {m['precision']:.3f} recall {m['recall']:.3f} (n={m['n']}); hedged guesses "
              f"decided as answers {m['hedged_guess_answers']:.3f}{kind}")
        for shape, (right, n) in m["shapes"].items():
            print(f"    {shape:22s} decided as labelled {right}/{n}")


def judged(model_spec: str, rows: list[dict], fallback) -> tuple[dict[str, bool], int]:
    """The LLM abstention judge's label per reply text (the question is not shown: the set has none); a reply
    naming neither label falls back to `fallback(text)`, as in an experiment. -> (labels, unparsed)."""
    llm = LLMJudge(load_model(model_spec), abstention=True)
    llm.prefetch([llm.abstention_text("(the question is not shown)", r["text"]) for r in rows])
    labels, unparsed = {}, 0
    for r in rows:
        label, _ = llm.abstains("(the question is not shown)", r["text"])
        if label is None:
            unparsed += 1
            label = fallback(r["text"])
        labels[r["text"]] = bool(label)
    return labels, unparsed


def main(show_errors: bool = False, judge: str | None = None) -> int:
    hybrid = get_detector("hybrid")
    rows = load()
    print(f"reply shapes, held-back third ({len(rows)} rows, never fitted on; every third template held back):")
    hybrid.decide_many([r["text"] for r in rows])
    _print(f"{hybrid.name}-v{hybrid.version}", figures(rows, hybrid.is_abstention, hybrid.kind))
    if show_errors:
        for r in rows:
            if bool(hybrid.is_abstention(r["text"])) != r["abstains"]:
                print(f"    {'missed' if r['abstains'] else 'false '} [{r['shape']}] {r['text']}")
    if judge:
        labels, unparsed = judged(judge, rows, hybrid.is_abstention)
        _print(f"llm-judge {judge}", figures(rows, labels.__getitem__))
        print(f"  judge replies naming neither label (the hybrid detector decided): {unparsed} of {len(rows)}")
    return 0
