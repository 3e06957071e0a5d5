"""The plan `dkilab gpu` prints before it runs: per config, the cells still to run (finished ones are
read from the tracking store and skipped), their questions, and an estimated time from throughput
measured on the model itself (prefill and decode tokens/s, batched decode where the cells batch).

The estimate per question: prompt tokens / prefill rate + new tokens / decode rate, times the fact-call
rounds a strategy may take, plus one judge call per answerable question; divided by the processes.
It is an estimate: a cell's real wall time is logged as its `wall_s` metric.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from dkilab.eval.tracking import runstate
from dkilab.types import BatchModel, TokenizedModel

FILLER = ("The user and the assistant talked about trips, books, work and family over many weeks. " * 40)


@dataclass
class Throughput:
    prefill_tok_s: float
    decode_tok_s: float
    batch_decode_tok_s: float  # tokens/s over a whole batch of `batch` prompts (= decode_tok_s at batch 1)
    batch: int = 1

    def seconds(self, prompt_tokens: float, new_tokens: float, batched: bool = False) -> float:
        decode = self.batch_decode_tok_s if batched and self.batch > 1 else self.decode_tok_s
        return prompt_tokens / self.prefill_tok_s + new_tokens / decode


def measure(model, prompt_tokens: int = 256, new_tokens: int = 16, batch: int = 1) -> Throughput:
    """Prefill and decode rates of a loaded model (any kind: local, served): one short and one long
    generation after the same prompt, warmed up first."""
    tok = model.tokenizer if isinstance(model, TokenizedModel) else None  # served, maybe none: ~4 chars a token
    text = tok.decode(model.encode(FILLER)[:prompt_tokens]) if tok is not None else FILLER[:prompt_tokens * 4]
    prompt = [{"role": "user", "content": text + "\nContinue the story:"}]
    model.generate_full(prompt, max_new_tokens=1)  # warm-up (kernels, caches, connection)
    t = time.perf_counter()
    short = model.generate_full(prompt, max_new_tokens=1)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    long = model.generate_full(prompt, max_new_tokens=new_tokens + 1)
    t2 = time.perf_counter() - t
    steps = max(1, long.new_tokens - short.new_tokens)
    prefill = short.prompt_tokens / max(t1, 1e-6)
    decode = steps / max(t2 - t1, 1e-6)
    batch_rate = decode
    if batch > 1 and isinstance(model, BatchModel):
        t = time.perf_counter()
        gens = model.generate_batch([prompt] * batch, max_new_tokens=new_tokens + 1)
        tb = time.perf_counter() - t - batch * short.prompt_tokens / prefill
        batch_rate = sum(g.new_tokens for g in gens) / max(tb, 1e-6)
    return Throughput(prefill, decode, max(batch_rate, decode), batch)


ROUNDS = {"recall_v4": 2.0}  # fact-call rounds on a model that calls tools (each a prefill + decode)
NO_HISTORY = {"no_memory"}  # shows no history: the prompt is the question alone
HISTORY_AS_KV = {"full_attention"}  # the history goes in as a K/V block (encoded once per question), not as text


def cell_seconds(cell, questions: int, tp: Throughput, judge_tp: Throughput | None, processes: int = 1) -> float:
    """Estimated wall time of one cell (see the module doc)."""
    p = cell.params
    budget = getattr(p, "history_budget", None) or 0
    new = getattr(p, "max_new_tokens", 64) or 64
    name = cell.strategy.name
    text_history = 0 if name in NO_HISTORY | HISTORY_AS_KV else budget
    prompt = text_history + 120  # the question, the instructions and the chat template around the history
    batched = cell.model.batch_size > 1  # K/V questions decode together too (models.kv_batch)
    per_q = tp.seconds(prompt, new, batched) * ROUNDS.get(name, 1.0)
    if name in HISTORY_AS_KV:
        per_q += budget / tp.prefill_tok_s  # the history block encoded once per question
    if judge_tp is not None and cell.judge is not None:
        per_q += judge_tp.seconds(200, cell.judge.max_new_tokens, batched=True)
    return questions * per_q / max(1, processes)


def fmt_seconds(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def build_plan(checked, throughput: dict[str, Throughput], uri: str, processes: int = 1) -> list[dict]:
    """One row per config: cells, cells finished before, questions to ask, estimated time."""
    import mlflow


    rows = []
    for path, cfg, cells in checked.configs:
        exp = mlflow.MlflowClient(uri).get_experiment_by_name(cfg.name)
        mlflow.set_tracking_uri(uri)
        done = set(runstate.finished_runs(exp.experiment_id)) if exp is not None else set()
        todo = [c for c in cells if c.config_hash not in done]
        questions = sum(checked.questions.get((path, c.config_hash), 0) for c in todo)
        seconds = 0.0
        for c in todo:
            tp = throughput.get(c.model.spec) if c.needs_model else None
            n = checked.questions.get((path, c.config_hash), 0)
            if tp is not None:
                seconds += cell_seconds(c, n, tp, throughput.get(c.judge.model) if c.judge else None, processes)
        rows.append({"config": str(path), "experiment": cfg.name, "cells": len(cells),
                     "finished_before": len(cells) - len(todo), "questions": questions, "estimate_s": round(seconds),
                     "estimate": fmt_seconds(seconds)})
    return rows


def plan_table(rows: list[dict]) -> str:
    head = f"{'config':<48} {'cells':>5} {'done':>5} {'questions':>9} {'estimate':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['config'][-48:]:<48} {r['cells']:>5} {r['finished_before']:>5} {r['questions']:>9} {r['estimate']:>9}")
    total = sum(r["estimate_s"] for r in rows)
    lines.append(f"{'total':<48} {sum(r['cells'] for r in rows):>5} {sum(r['finished_before'] for r in rows):>5} "
                 f"{sum(r['questions'] for r in rows):>9} {fmt_seconds(total):>9}")
    return "\n".join(lines)
