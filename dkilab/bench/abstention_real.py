"""The abstention detector on real model replies: GPT-4o-mini answering LoCoMo questions of categories 1-4 with the
whole conversation in context (the LoCoMo audit's two full-context runs, read from the data dir at run time,
never copied into the project).

The check set (`datasets/fixtures/abstention/real_replies_labels.jsonl`: each reply's run and question id, a digest
of its text, how it was drawn, the label and the reason, never the text) was labelled once by hand, reading the
question first:
- `decline`: no value is committed for what was asked, even when other facts are given ("Ana moved to Lisbon for
  work, but the exact date of the move is not specified" to a *when* question);
- `answer`: a value is committed for what was asked, however hedged or negated ("around 3 March 2021, though she
  did not give the day", "No, there is no evidence she went", a guess after a decline);
- `partial`: one part of the question answered and another declined (to "where and how long did Ana study?":
  "two years; the city is not mentioned"). Counted apart: neither a decline nor an answer.

How they were drawn (`pool`): `marked`, every reply of the two runs with a word of absence (not specified /
mentioned / provided ..., no information / mention / evidence ..., unknown, unclear, there is no ...: the `MARK`
pattern below), and `sample`, 60 replies of each run without one (seed 82), which measure the declines that
pattern misses and the answers a detector might flag. Declines are rare in these runs (63 of 3,080 replies), so
the precision and recall of decline are read over the labelled rows, not the whole runs.

The replies are a declared source of their own (`real_gpt4o_mini`): LoCoMo conversations 0-4 are its dev part
(its errors may be read), 5-9 the held-out part (measured, never read for rules).

    dkilab bench abstention --real [--errors]     (needs $DKILAB_DATA_DIR with locomo_audit/)
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from dkilab.text.abstention.asked import asked_decision
from dkilab.text.abstention.learned import WEIGHTS, get_detector

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "datasets" / "fixtures" / "abstention" / "real_replies_labels.jsonl"
RUNS = ("gpt-4o-mini-memos", "gpt-4o-mini-cot")
KINDS = ("decline", "answer", "partial")
SAMPLE, SEED = 60, 82
MARK = re.compile(
    r"\bnot (?:been |being )?(?:specified|mentioned|provided|stated|available|known|clear|explicitly|given|indicated|"
    r"detailed|included|recorded|disclosed|documented|discussed|addressed|said|described|identified|named|referenced|"
    r"noted)|\bno (?:information|mention|specific|details?|record|evidence|indication|data|reference|memory|memories|"
    r"explicit|clear|direct)\b|\bunknown\b|\bcannot be (?:determined|inferred|confirmed)|\bcan't be (?:determined|"
    r"inferred)|\bunable to\b|\b(?:does|do|did) not (?:specify|mention|provide|say|state|indicate|include|contain|"
    r"reveal|detail)|\bdoesn't (?:specify|mention|say|state|indicate)|\black(?:s|ing)?\b|\bunclear\b|\bnot sure\b|"
    r"\bn/a\b|\bnone\b|\bthere (?:is|are|was|were) no\b|\bnot in the\b|\binsufficient\b|\bunspecified\b|"
    r"\bunavailable\b", re.I)
DEV = range(0, 5)  # LoCoMo conversations of the dev part
_QID = re.compile(r"^locomo_(\d+)_qa\d+$")


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def replies(data_dir: str | Path) -> dict[str, dict[str, Any]]:
    """`<run>:<question id>` -> {question, reply} of the two runs."""
    out = {}
    for run in RUNS:
        path = Path(data_dir) / "locomo_audit" / "fc-baseline" / run / "eval_results.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the LoCoMo audit's full-context run is not in the data dir "
                                    "(datasets/locomo_audit.md)")
        data = json.loads(path.read_text(encoding="utf-8"))
        for entries in data["detailed_results"].values():
            for e in entries:
                out[f"{run}:{e['question_id']}"] = {"question": e["question"], "reply": e["generated_answer"]}
    return out


def pool(data_dir: str | Path) -> list[dict[str, Any]]:
    """The replies the check set is drawn from, as it was drawn: every marked reply, then the sample of each run."""
    every = replies(data_dir)
    rng = random.Random(SEED)
    out = []
    for run in RUNS:
        keys = [k for k in every if k.startswith(run + ":")]
        marked = [k for k in keys if MARK.search(every[k]["reply"])]
        rest = [k for k in keys if not MARK.search(every[k]["reply"])]
        out += [{"key": k, "pool": "marked"} for k in marked] + [{"key": k, "pool": "sample"}
                                                                 for k in rng.sample(rest, SAMPLE)]
    return out


def load(data_dir: str | Path, path: Path = LABELS) -> list[dict[str, Any]]:
    """Every labelled reply with its text, question and part (dev / held_out); a digest that differs from the
    data's text is an error naming the key (the label is of that text)."""
    every = replies(data_dir)
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("label") not in KINDS:
            raise ValueError(f"{path}:{n}: label {rec.get('label')!r} is not one of {', '.join(KINDS)}")
        got = every.get(rec["key"])
        if got is None:
            raise ValueError(f"{path}:{n}: {rec['key']} is not a reply of the runs in the data dir")
        if digest(got["reply"]) != rec["sha1"]:
            raise ValueError(f"{path}:{n}: {rec['key']}: the reply's text differs from the one labelled (sha1 "
                             f"{rec['sha1']}): another version of the data")
        m = _QID.match(rec["key"].split(":", 1)[1])
        part = "dev" if m and int(m.group(1)) in DEV else "held_out"
        rows.append(rec | got | {"part": part})
    return rows


def figures(decide, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per part: precision and recall of decline over the declines and answers, the partials' decisions apart.
    `decide(question, reply) -> bool` (declines)."""
    out: dict[str, dict[str, Any]] = {}
    for part in ("dev", "held_out", "all"):
        sub = [r for r in rows if part in ("all", r["part"])]
        said = [(r, bool(decide(r["question"], r["reply"]))) for r in sub]
        tp = sum(1 for r, d in said if d and r["label"] == "decline")
        fp = sum(1 for r, d in said if d and r["label"] == "answer")
        fn = sum(1 for r, d in said if not d and r["label"] == "decline")
        out[part] = {"n": len(sub), "declines": tp + fn, "precision": tp / (tp + fp) if tp + fp else float("nan"),
                     "recall": tp / (tp + fn) if tp + fn else float("nan"), "false_alarms": fp, "missed": fn,
                     "partials_declined": f"{sum(1 for r, d in said if d and r['label'] == 'partial')} of "
                                          f"{sum(1 for r in sub if r['label'] == 'partial')}"}
    return out


def errors(decide, rows: list[dict[str, Any]], part: str = "dev") -> list[str]:
    """The dev part's errors, to read (never the held-out part's)."""
    out = []
    for r in rows:
        if r["part"] != part or r["label"] == "partial":
            continue
        d = bool(decide(r["question"], r["reply"]))
        if d != (r["label"] == "decline"):
            what = "FALSE ALARM" if d else "MISSED"
            out.append(f"{what} {r['key']}: Q {r['question']!r}\n    A {r['reply'][:300]!r}")
    return out


def counts(rows: list[dict[str, Any]]) -> Counter:
    return Counter((r["pool"], r["label"]) for r in rows)


def decide_with(detector) -> Any:
    """`decide(question, reply)` of a detector as the harness scores: the question rule first, the detector where
    it decides nothing."""
    def decide(question: str, reply: str) -> bool:
        asked = asked_decision(question, reply)
        return detector.decide(reply)[0] if asked is None else asked

    return decide


def main(data_dir=None, show_errors: bool = False, save: bool = False) -> int:
    """The figures per part for the hybrid detector read alone and with the question rule (the harness's path),
    and the rules alone; `save`: the held-out figures into the weights (`figures.real_replies`, the card)."""
    where = data_dir or os.environ.get("DKILAB_DATA_DIR")
    if not where:
        print("dkilab: error: --real reads the LoCoMo audit's replies from the data dir (--data-dir or "
              "$DKILAB_DATA_DIR)")
        return 2
    rows = load(where)
    c = counts(rows)
    print(f"real replies: {len(rows)} labelled GPT-4o-mini replies to LoCoMo questions (" + ", ".join(
        f"{pool} {label} {n}" for (pool, label), n in sorted(c.items())) + "); dev = conversations 0-4, held out 5-9")
    hybrid, structural = get_detector("hybrid"), get_detector("structural")
    hybrid.decide_many([r["reply"] for r in rows])
    paths = {"hybrid + question rule (what the harness scores)": decide_with(hybrid),
             "hybrid, the reply alone": lambda q, a: hybrid.decide(a)[0],
             "structural + question rule": decide_with(structural),
             "structural, the reply alone": lambda q, a: structural.decide(a)[0]}
    out = {}
    for name, fn in paths.items():
        out[name] = figs = figures(fn, rows)
        print(f"  {name}:")
        for part, m in figs.items():
            print(f"    {part:9s} declines {m['declines']:3d} of {m['n']:3d}: precision {m['precision']:.3f} recall "
                  f"{m['recall']:.3f} ({m['false_alarms']} false alarms, {m['missed']} missed; partials declined "
                  f"{m['partials_declined']})")
    if show_errors:
        print("  the dev part's errors (hybrid + question rule):")
        for e in errors(paths["hybrid + question rule (what the harness scores)"], rows):
            print("    " + e)
    if save:
        held = out["hybrid + question rule (what the harness scores)"]["held_out"]
        weights = json.loads(WEIGHTS.read_text(encoding="utf-8"))
        weights.setdefault("figures", {})["real_replies"] = {"en": {
            "precision": round(held["precision"], 4), "recall": round(held["recall"], 4), "n": held["n"],
            "declines": held["declines"], "part": "held out: LoCoMo conversations 5-9", "source": "real_gpt4o_mini",
            "labels_sha1": digest(LABELS.read_text(encoding="utf-8"))}}
        WEIGHTS.write_text(json.dumps(weights, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"  the held-out figures written to {WEIGHTS.relative_to(ROOT)} (figures.real_replies)")
    return 0
