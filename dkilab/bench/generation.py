"""Batched generation benchmark: new tokens/s of greedy decoding at several batch sizes on the
offline SmolLM2 (or any model spec), with the fixtures' questions as chat prompts. Batched output is
token for token the unbatched one (tests/models/test_batching.py); only the speed differs.

    dkilab bench generation [--model offline:smollm2] [--prompts 16] [--new-tokens 24] [--batch-sizes 1,4,8,16]
"""
from __future__ import annotations

import time

from dkilab.eval.data import load_dataset
from dkilab.models import load_model


def main(model_spec: str = "offline:smollm2", prompts: int = 16, new_tokens: int = 24,
         batch_sizes: tuple[int, ...] = (1, 4, 8, 16)) -> int:
    model = load_model(model_spec)
    qs = [q.question for c in load_dataset("fixtures") for q in c.questions][:prompts]
    msgs = [[{"role": "user", "content": q}] for q in qs]
    model.generate_batch(msgs[:2], max_new_tokens=2)  # warm up
    print(f"{model.name}: {len(msgs)} prompts, up to {new_tokens} new tokens each, greedy")
    print(f"{'batch':>5} {'seconds':>8} {'new tokens':>10} {'tokens/s':>9} {'speed-up':>8}")
    base = None
    for b in batch_sizes:
        t = time.perf_counter()
        gens: list = []
        for i in range(0, len(msgs), b):
            chunk = msgs[i:i + b]
            gens += ([model.generate_full(chunk[0], max_new_tokens=new_tokens)] if b == 1
                     else model.generate_batch(chunk, max_new_tokens=new_tokens))
        wall = time.perf_counter() - t
        tokens = sum(g.new_tokens for g in gens)
        rate = tokens / wall
        base = base or rate
        print(f"{b:>5} {wall:>8.1f} {tokens:>10} {rate:>9.1f} {rate / base:>7.2f}x")
    return 0
