"""The methodology card of an experiment run: what a reader needs to compare its figures with published ones. On the
parent run as `methodology.json` and at the top of its Overview; `dkilab report EXPERIMENT --card` prints it.

It states the answer model and the judge model with the digests of their prompts, each cell's dataset, split and
question count, its budget and recall settings, LLM calls and tokens per question (measured), the abstention
detector, the hardware, and dkilab's version and commit.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from typing import Any

from dkilab.eval.data.published import describe
from dkilab.eval.scoring.abstention import detector_card
from dkilab.prompts import ABSTENTION_PROMPT, JUDGE_PROMPT

CARD_FILE = "methodology.json"
BUDGET_KEYS = ("history_budget", "max_new_tokens", "max_prompt_tokens", "temperature")


def digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def hardware() -> dict[str, Any]:
    """This machine: OS, CPU count and memory, and the GPUs when torch is already loaded (never imported here)."""
    out: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                           "cpus": os.cpu_count()}
    try:
        out["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):  # not on every platform
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    else:
        out["gpus"] = []
    return out


def _cell(result) -> dict[str, Any]:
    cell, m = result.cell, result.metrics or {}
    ident = cell.generation_identity
    params = cell.params.model_dump(mode="json") if cell.params is not None else {}
    rounds = m.get("mean_rounds", 1.0 if cell.needs_model else 0.0)
    imported = describe(cell.instance) if cell.instance.needs().answers_from_file else None
    out = {
        "cell": cell.label,
        "status": "failed" if result.error else ("read back" if result.skipped else "finished"),
        "strategy": f"{cell.strategy.name} v{ident['strategy']['version']}",
        "answer_model": ident["model"]["spec"] if cell.needs_model else None,
        "prompts_sha1": digest(ident["strategy_identity"].get("prompts")),
        "dataset": {"name": cell.dataset.name, "split": cell.dataset.split, "conversations": cell.dataset.limit,
                    "questions": m.get("questions")},
        "budget": {k: params[k] for k in BUDGET_KEYS if k in params},
        "recall": params.get("recall"),
        "per_question": {"answer_model_calls": rounds, "tokens_processed": m.get("tokens_processed"),
                         "prompt_tokens": m.get("prompt_tokens"), "injected_tokens": m.get("injected_tokens")},
    }
    if imported is not None:  # a published run: its file and models; what it was given and cost are not known
        out |= {"answer_model": imported["answer_model"] or "unknown (the file does not say)", "imported": imported,
                "budget": {}, "prompts_sha1": None}
        out["per_question"] = {"answer_model_calls": None, "tokens_processed": None, "prompt_tokens": None,
                               "injected_tokens": None}
    return out


def methodology_card(cfg, results, provenance: dict[str, str]) -> dict[str, Any]:
    """The card of a finished experiment run (`results`: its CellResults, in config order)."""
    judge = None
    if cfg.judge is not None:
        prompts = cfg.judge.prompts() or {"judge": cfg.judge.prompt or JUDGE_PROMPT}  # a protocol's, by kind
        if cfg.judge.abstention:
            prompts["abstention"] = cfg.judge.abstention_prompt or ABSTENTION_PROMPT
        judge = {"model": cfg.judge.model, "protocol": cfg.judge.protocol, "prompts_sha1": digest(prompts),
                 "abstention": bool(cfg.judge.abstention), "calls_per_question": 2 if cfg.judge.abstention else 1}
    det = detector_card(cfg.abstention_detector)
    return {"experiment": cfg.name, "dkilab_version": provenance.get("dkilab.version"),
            "commit": provenance.get("mlflow.source.git.commit"), "hardware": hardware(), "judge": judge,
            "abstention_detector": {"name": det["name"], "version": det["version"]},
            "cells": [_cell(r) for r in results]}


def markdown(card: dict[str, Any]) -> str:
    """The card as the Overview shows it and `dkilab report --card` prints it."""
    hw = card["hardware"]
    judge = card["judge"]
    lines = [f"dkilab {card['dkilab_version']} at commit `{card['commit']}`; {hw['platform']}, {hw['cpus']} CPUs"
             + (f", {hw['memory_gib']} GiB" if "memory_gib" in hw else "")
             + (f", GPUs: {', '.join(hw['gpus'])}" if hw["gpus"] else ", no GPU") + ".",
             ("Judge: `{model}` ({how}prompts `{prompts_sha1}`, {calls_per_question} call(s) per question)".format(
                 **judge, how="LongMemEval's answer check, " if judge.get("protocol") == "longmemeval" else "")
              if judge else "Judge: none") + f"; abstention detector {card['abstention_detector']['name']}-"
             f"v{card['abstention_detector']['version']}.", "",
             "| cell | answer model | prompts | dataset (split) | questions | budget | model calls / q | tokens / q |",
             "|---|---|---|---|---|---|---|---|"]
    for c in card["cells"]:
        d, q = c["dataset"], c["per_question"]
        budget = ", ".join(f"{k} {v}" for k, v in c["budget"].items() if v is not None)
        tokens = f"{q['tokens_processed']:.0f}" if isinstance(q["tokens_processed"], (int, float)) else "-"
        calls = f"{q['answer_model_calls']:.2f}" if isinstance(q["answer_model_calls"], (int, float)) else "-"
        questions = f"{d['questions']:.0f}" if isinstance(d["questions"], (int, float)) else "-"
        prompts = f"`{c['prompts_sha1']}`" if c["prompts_sha1"] else "-"
        lines.append(f"| {c['cell']} | {c['answer_model'] or '-'} | {prompts} | {d['name']} ({d['split']}) "
                     f"| {questions} | {budget} | {calls} | {tokens} |")
    sources = [c for c in card["cells"] if c.get("imported")]
    if sources:
        lines += ["", "Imported cells (answers read from a published file, never generated):"]
        lines += [f"- {c['cell']}: `{c['imported']['source']}` (sha1 `{c['imported']['sha1'][:12]}`, "
                  f"{c['imported']['format']}); answers by {c['answer_model']}, the file's judge "
                  f"{c['imported']['judge_model'] or 'not named'}" for c in sources]
    return "\n".join(lines)
