"""The reply-shapes check of the abstention detector (issue 61; `dkilab bench abstention --shapes`): on the
held-back third of `datasets/fixtures/abstention/reply_shapes.jsonl` (replies in the five shapes 7B-class
models write, each written to its label, never fitted on), precision and recall of abstention per language,
the share decided as labelled per shape, and the share of hedged guesses decided as answers."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

SHAPES = Path(__file__).resolve().parents[2] / "datasets" / "fixtures" / "abstention" / "reply_shapes.jsonl"


def load(split: str = "held_back", path: Path = SHAPES) -> list[dict]:
    from dkilab.config import read_jsonl

    return [r for r in read_jsonl(path) if split == "all" or r["split"] == split]


def figures(rows: list[dict], is_abstention) -> dict:
    """{lang: {precision, recall, n, shapes: {shape: (right, n)}, hedged_guess_answers: share}}."""
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
        guesses = [got for r, got in pairs if r["kind"] == "hedged_guess"]
        out[lang] = {"precision": tp / called if called else 1.0, "recall": tp / gold if gold else 1.0, "n": len(pairs),
                     "shapes": {s: tuple(v) for s, v in sorted(shapes.items())},
                     "hedged_guess_answers": (sum(not g for g in guesses) / len(guesses)) if guesses else None}
    return out


def main(show_errors: bool = False) -> int:
    from dkilab.eval.metrics.abstention import get_detector

    hybrid = get_detector("hybrid")
    rows = load()
    print(f"reply shapes, held-back third ({len(rows)} rows, never fitted on), {hybrid.name}-v{hybrid.version}:")
    for lang, m in figures(rows, hybrid.is_abstention).items():
        print(f"  {lang}: precision {m['precision']:.3f} recall {m['recall']:.3f} (n={m['n']}); hedged guesses decided "
              f"as answers {m['hedged_guess_answers']:.3f}")
        for shape, (right, n) in m["shapes"].items():
            print(f"    {shape:22s} decided as labelled {right}/{n}")
    if show_errors:
        for r in rows:
            if bool(hybrid.is_abstention(r["text"])) != r["abstains"]:
                print(f"    {'missed' if r['abstains'] else 'false '} [{r['shape']}] {r['text']}")
    return 0
