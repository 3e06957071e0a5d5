"""The evaluation pipeline's `eval_results.json` (EverMemOS's evaluation framework; the LoCoMo audit's fc- and
ap-baselines, github.com/dial481/locomo-audit): `detailed_results` maps each conversation to its entries
(question_id `locomo_N_qaK`, question, golden_answer, generated_answer, llm_judgments {judgment_1..n: bool},
category), `metadata` names the answer and judge models."""
from __future__ import annotations

import json
from pathlib import Path

from dkilab.eval.data.published.base import Prediction, PredictionsError, PublishedRun, register_reader


def _sniff(path: Path) -> bool:
    with path.open("rb") as f:
        return b'"detailed_results"' in f.read(4096)


@register_reader("eval_results", suffixes=(".json",), sniff=_sniff)
def read_eval_results(path: Path) -> PublishedRun:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PredictionsError(f"{path}: not readable as JSON ({exc})") from None
    groups = data.get("detailed_results") if isinstance(data, dict) else None
    if not isinstance(groups, dict):
        raise PredictionsError(f"{path}: no `detailed_results` object (the evaluation pipeline's eval_results.json)")
    out = []
    for group, entries in groups.items():
        if not isinstance(entries, list):
            raise PredictionsError(f"{path}: detailed_results.{group} is not a list of entries")
        for k, e in enumerate(entries):
            where = f"detailed_results.{group}[{k}]"
            if not isinstance(e, dict) or not isinstance(e.get("generated_answer"), str):
                raise PredictionsError(f"{path}: {where}: needs a generated_answer string")
            judged = e.get("llm_judgments") or {}
            if not isinstance(judged, dict) or not all(isinstance(v, bool) for v in judged.values()):
                raise PredictionsError(f"{path}: {where}: llm_judgments must map judgment_<n> to true/false")
            verdicts = tuple(judged[key] for key in sorted(judged, key=lambda x: (len(x), x)))
            qid = e.get("question_id")
            out.append(Prediction(f"{where} ({qid})", e["generated_answer"], str(qid) if qid is not None else None,
                                  e.get("question"), verdicts,
                                  str(e["category"]) if e.get("category") is not None else None))
    meta = data.get("metadata") or {}
    judge = meta.get("judge_model") or meta.get("model")
    return PublishedRun(path, "eval_results", out, meta.get("answer_model"), judge,
                        {k: meta[k] for k in ("num_runs", "mean_accuracy") if k in meta})
