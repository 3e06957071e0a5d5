"""Strategy benchmark: every strategy on N LoCoMo questions with a real model; per strategy the
prompt and injected tokens, p50 latency split into recall / assembly / generation, and fact calls.

Every strategy with a `recall:` block (recall_v4, full_attention, any new one) runs the library's recall
defaults (learned fusion). `max_prompt_tokens` caps every prompt (CPU time: SmolLM2 prefills about 600
tokens/s here), so full_history keeps the newest messages that fit.
"""
from __future__ import annotations

import statistics
import time

from dkilab.eval.data import load_dataset
from dkilab.eval.harness.stores import store_for
from dkilab.models import load_model
from dkilab.strategies import BUILTIN, create_strategy


def _p50(xs):
    return statistics.median(xs) if xs else 0.0


def run(data_dir: str | None = None, questions: int = 20, model_spec: str = "offline:smollm2",
        max_prompt_tokens: int = 4096, max_new_tokens: int = 24, strategies: list[str] | None = None):
    conv = load_dataset("locomo", data_dir=data_dir, limit=1)[0]
    qs = [q for q in conv.questions if q.answerable][:questions]
    store = store_for([conv], "locomo")
    memory = store.for_user(conv.user_id)
    t = time.perf_counter()
    model = load_model(model_spec)
    print(f"model {model.name} loaded in {time.perf_counter() - t:.1f} s; {len(qs)} questions of "
          f"{conv.conversation_id} ({len(conv.messages)} messages); prompts capped at {max_prompt_tokens} tokens")
    rows = {}
    for name in strategies or BUILTIN:
        store.embedder.clear_cache()  # every strategy starts with cold query caches
        params = {"max_new_tokens": max_new_tokens, "max_prompt_tokens": max_prompt_tokens}
        strategy = create_strategy(name, params)
        answers = [strategy.answer(q.question, memory, model) for q in qs]
        lat = {s: [a.latency_ms.get(s, 0.0) for a in answers] for s in ("recall", "assembly", "generation")}
        rows[name] = {
            "prompt_tok": _p50([a.prompt_tokens for a in answers]),
            "injected_tok": _p50([a.injected_tokens for a in answers]),
            "recall_ms": _p50(lat["recall"]), "assembly_ms": _p50(lat["assembly"]),
            "generation_ms": _p50(lat["generation"]),
            "fact_calls": float(sum(len(a.fact_calls) for a in answers)),
        }
        print(f"  {name}: done", flush=True)
    return rows


def print_table(rows) -> None:
    cols = list(next(iter(rows.values())))
    print(f"\n{'strategy (p50)':16s}" + "".join(f"{c:>15s}" for c in cols))
    for name, row in rows.items():
        print(f"{name:16s}" + "".join(f"{row[c]:15.0f}" if c.endswith("_tok") or c == "fact_calls"
                                      else f"{row[c]:15.1f}"
                                      for c in cols))


def main(**kwargs) -> int:
    print_table(run(**kwargs))
    return 0
