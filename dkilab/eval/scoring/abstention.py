"""Hallucination on unanswerable questions, and how far to trust it.

`hallucination_rate` = share of unanswerable questions answered anyway; `abstention_rate_answerable`
= share of answerable ones declined. Both rest on an abstention detector: the structural rules of
`dkilab.text.abstention` by default, or an LLM judge (`judge: {abstention: true}` in an experiment).
Every cell logs the detector's name and version with these metrics, and its precision / recall on the
held-out test half of the labelled phrasings (`datasets/fixtures/abstention/phrasings.jsonl`, written
for this project: zh and en abstentions, plain answers and hard negatives with negations, hedges and
quoted speech), so a reader knows how far a difference in hallucination can be trusted.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from dkilab.cache import cache_dir
from dkilab.config import read_jsonl
from dkilab.eval.scoring.base import Scored, metric
from dkilab.prompts import ABSTAIN_PHRASE
from dkilab.text.abstention import DETECTOR, StructuralDetector, is_abstention
from dkilab.text.abstention.asked import VERSION as ASKED_VERSION
from dkilab.text.abstention.commit import reply_kind
from dkilab.text.abstention.learned import DEFAULT_DETECTOR, DETECTOR_NAMES, get_detector

PHRASINGS = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "abstention" / "phrasings.jsonl"

__all__ = ["ABSTAIN_PHRASE", "DETECTOR", "StructuralDetector", "is_abstention", "load_phrasings", "evaluate_detector",
           "detector_card", "get_detector", "DETECTOR_NAMES", "DEFAULT_DETECTOR"]




# version 2: the reply is read with its question first (dkilab/text/abstention/asked.py)
@metric("abstention_rate_answerable", group="answers",
        field="abstained", subset="answerable", higher_is_better=False, version="2",
        depends_on="abstention", description="answerable questions the answer declined (abstention detector)")
def _abstained(q: Scored):
    return q.abstained


@metric("abstention_by_learned", group="answers",
        subset="all", higher_is_better=False, depends_on="abstention", version="2",
        description="answers whose abstention verdict the hybrid detector's learned component made (the rest: rules)")
def _by_learned(q: Scored):
    return q.abstention_path == "learned"


@metric("hallucination_rate", group="answers", label="hallucination rate (0-1, lower is better)", rate=True, plot=6,
        narrow=("answers",), paired=True, field="hallucinated", higher_is_better=False, per_category=True, rank=10,
        depends_on="abstention", version="3",
        description="unanswerable questions answered anyway (abstention detector); a reply that is a call "
                    "(final_call) is no answer and does not count")
def _hallucinated(q: Scored):
    return None if q.item.answerable or q.answer.metadata.get("final_call") else float(not q.abstained)


@metric("hedged_guess_rate", group="answers",
        field="hedged_guess", subset="unanswerable", higher_is_better=False, rate=True,
        depends_on="abstention", version="2",
        description="unanswerable questions answered with a guess after a decline (\"I don't "
        "know, but I'd guess Leeds\"): part of hallucination_rate, reported apart")
def _hedged_guess(q: Scored):
    return None if q.item.answerable else float(reply_kind(q.answer.text, q.abstained) == "hedged_guess")


def load_phrasings(path: str | Path | None = None) -> list[dict]:
    """The labelled phrasings: {id, lang (en|zh), text, abstains, kind, split (dev|test)} per line."""
    return read_jsonl(path or PHRASINGS)


def evaluate_detector(is_abstention_fn=None, split: str = "test", rows: list[dict] | None = None
                      ) -> dict[str, dict[str, Any]]:
    """Precision, recall and F1 of abstention detection per language on one half of the labelled set."""
    fn = is_abstention_fn or DETECTOR.is_abstention
    out = {}
    rows = [r for r in (rows if rows is not None else load_phrasings()) if r["split"] == split]
    for lang in sorted({r["lang"] for r in rows}):
        rs = [r for r in rows if r["lang"] == lang]
        pred = [bool(fn(r["text"])) for r in rs]
        tp = sum(p and r["abstains"] for p, r in zip(pred, rs))
        fp = sum(p and not r["abstains"] for p, r in zip(pred, rs))
        fn_ = sum(not p and r["abstains"] for p, r in zip(pred, rs))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn_) if tp + fn_ else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[lang] = {"precision": precision, "recall": recall, "f1": f1, "n": float(len(rs)),
                     "errors": [r["id"] for p, r in zip(pred, rs) if p != r["abstains"]]}
    return out


@lru_cache(maxsize=4)
def detector_card(name: str = DEFAULT_DETECTOR) -> dict[str, object]:
    """A detector's name, version and measured figures per language: the rules' test-half precision/recall,
    and for the hybrid detector its leave-one-source-out, pooled and fresh-check figures (stored with its weights)."""
    det = get_detector(name)
    card: dict[str, object] = {"name": det.name, "version": det.version, "question_rule": ASKED_VERSION}
    if name == "structural":
        for lang, m in evaluate_detector(det.is_abstention).items():
            card |= {f"test_precision_{lang}": round(m["precision"], 3), f"test_recall_{lang}": round(m["recall"], 3)}
        return card
    card["weights_sha1"] = det.digest
    figures = det.weights.get("figures", {})
    for part, prefix in (("leave_one_source_out", "loso"), ("pooled_5fold", "pooled"), ("fresh_check", "fresh"),
                         ("real_replies", "real")):
        for lang, m in figures.get(part, {}).items():
            card |= {f"{prefix}_precision_{lang}": m["precision"], f"{prefix}_recall_{lang}": m["recall"]}
    return card


def _judge_cache(model: str, prompt: str):
    size = sum(p.stat().st_size for p in sorted(PHRASINGS.parent.glob("*.jsonl")))
    key = hashlib.sha1(f"{model}\n{prompt}\n{size}".encode()).hexdigest()[:16]
    return cache_dir() / "abstention" / f"judge-{key}.json"


def judge_card(model: str, prompt: str) -> dict[str, object]:
    """An LLM abstention judge's name, model and (if `dkilab bench abstention --judge` measured this model
    and prompt) its test-half precision/recall; figures not measured are said to be so."""
    card: dict[str, object] = {"name": "llm-judge", "version": "1", "model": model}
    path = _judge_cache(model, prompt)
    if path.exists():
        return card | json.loads(path.read_text(encoding="utf-8"))
    return card | {"sample_figures": f"not measured: dkilab bench abstention --judge {model}"}


def save_judge_card(model: str, prompt: str, figures: dict[str, dict[str, float]],
                    fresh: dict[str, dict[str, float]] | None = None) -> None:
    """Store a judge's measured figures (a sample of the labelled set; the fresh check) for the cells that use it."""
    path = _judge_cache(model, prompt)
    path.parent.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    for prefix, part in (("sample", figures), ("fresh", fresh or {})):
        for lang, m in part.items():
            out |= {f"{prefix}_precision_{lang}": round(m["precision"], 3),
                    f"{prefix}_recall_{lang}": round(m["recall"], 3)}
    path.write_text(json.dumps(out), encoding="utf-8")
