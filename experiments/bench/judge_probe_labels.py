"""The judge stress probes, labelled by hand (needs DKILAB_DATA_DIR with locomo/): 200 probes of each kind, drawn
from the questions of LoCoMo's dev half (conversations 0-4, categories 1-4) that have a probe of that kind, each
read beside its question and gold and labelled `ok` (it is what its kind says: a vague answer giving no specifics
the gold gives, a wrong answer the gold rules out, a paraphrase meaning what the gold means) or `error`, with a
reason. `judge_probe_labels.json` holds the labels with each probe's sha1, never a dataset's text.

    python experiments/bench/judge_probe_labels.py            # each kind's error rate; stale labels fail it
    python experiments/bench/judge_probe_labels.py --draft    # the sample to label, with its text (not committed)

A label is stale when the probe it was given to has changed (another sha1) or its question left the sample:
the library's probes moved since they were read, so the sample is read again before any figure is quoted.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

from dkilab.eval.data import load_dataset
from dkilab.eval.scoring.judge import gold_text
from dkilab.eval.scoring.judge_stress import KINDS, probes

LABELS = Path(__file__).with_name("judge_probe_labels.json")
SEED, SIZE, DEV = 85, 200, 5


def sample() -> dict[str, list[tuple]]:
    """For each kind, (qid, question, gold, probe) of SIZE questions drawn by `random.Random(SEED)`."""
    items = [q for conv in load_dataset("locomo")[:DEV] for q in conv.questions
             if q.category in (1, 2, 3, 4) and q.answer is not None]
    out = {}
    for kind in KINDS:
        having = [(q.qid, q.question, gold_text(q), p[kind]) for q in items
                  if kind in (p := probes(q, gold_text(q)))]
        out[kind] = random.Random(SEED).sample(having, SIZE)
    return out


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def check(labels: dict) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Each kind's (errors, labelled) and the stale labels, each named by kind and question id."""
    drawn, rates, stale = sample(), {}, []
    for kind in KINDS:
        given = {r["qid"]: r for r in labels.get(kind, [])}
        now = {qid: probe for qid, _, _, probe in drawn[kind]}
        stale += [f"{kind} {qid}: not labelled" for qid in now if qid not in given]
        stale += [f"{kind} {qid}: no longer in the sample" for qid in given if qid not in now]
        stale += [f"{kind} {qid}: the probe changed since it was labelled" for qid, r in given.items()
                  if qid in now and r["sha1"] != digest(now[qid])]
        read = [r for qid, r in given.items() if qid in now]
        rates[kind] = (sum(r["label"] == "error" for r in read), len(read))
    return rates, stale


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draft", action="store_true", help="print the sample to label (qid, question, gold, probe)")
    args = ap.parse_args(argv)
    if args.draft:
        for kind, rows in sample().items():
            for qid, question, gold, probe in rows:
                print(json.dumps({"kind": kind, "qid": qid, "question": question, "gold": gold, "probe": probe,
                                  "sha1": digest(probe)}, ensure_ascii=False))
        return 0
    rates, stale = check(json.loads(LABELS.read_text()))
    for kind, (errors, n) in rates.items():
        print(f"{kind}: {errors} errors of {n} hand-labelled probes ({errors / n if n else float('nan'):.1%})")
    for line in stale:
        print(f"stale: {line}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
