"""How `learned.cue_kind` sorts every question of the datasets (issue 30): per dataset, how many recall cues are
questions (ranked by the fusion model's question parts) and how many are conversational cues (its `utterance`
parts), with the first few cues of each kind. Rerun it after changing the rule (`learned.ROUTING`): a count
that moves is a figure of `dkilab bench retrieval` that may move.

    python experiments/bench/cue_kinds.py [--data-dir DIR] [--show N] [--datasets locomo memdaily ...]

Needs $DKILAB_DATA_DIR (or --data-dir) for the public datasets; `fixtures` is bundled."""
from __future__ import annotations

import argparse
import os

NAMES = ["locomo", "memdaily", "madial_bench_en", "madial_bench_zh", "fixtures"]


def kinds(name: str, data_dir=None) -> dict[str, list[str]]:
    """{kind: the cues of `name` of that kind}, over every conversation (all splits)."""
    from dkilab.eval.data import load_dataset
    from dkilab.eval.harness.cell import question_text
    from dkilab.recall.learned import cue_kind

    out: dict[str, list[str]] = {"question": [], "utterance": []}
    for conv in load_dataset(name, data_dir):
        for item in conv.questions:
            text = question_text(item)
            out[cue_kind(text)].append(text)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("DKILAB_DATA_DIR"))
    p.add_argument("--show", type=int, default=2, help="cues of each kind to print per dataset")
    p.add_argument("--datasets", nargs="+", default=NAMES)
    a = p.parse_args()
    from dkilab.recall.learned import ROUTING

    print(f"cue rule {ROUTING}")
    print(f"{'dataset':<18} {'questions':>9} {'cues':>6}")
    for name in a.datasets:
        got = kinds(name, a.data_dir)
        print(f"{name:<18} {len(got['question']):>9} {len(got['utterance']):>6}")
        for kind, texts in got.items():
            for text in texts[:a.show]:
                print(f"    {kind:<9} {text[:90]!r}")


if __name__ == "__main__":
    main()
