"""What 10 models x 5 strategies x 4 datasets cost on GPUs, on paper: question counts read from the data,
per-question time from `dkilab.gpu.plan.cell_seconds` (the formula `dkilab gpu` plans with) at stated
rates. `dkilab gpu --plan-only` replaces the rates with ones measured on your GPU and model.

    DKILAB_DATA_DIR=../shared/datasets python experiments/bench/gpu_cost.py [--models 10] [--gpus 8]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from dkilab.gpu.plan import Throughput, cell_seconds, fmt_seconds
from dkilab.gpu.preflight import preflight

# one A100-80GB, a 7-8B model in bf16 (vLLM / transformers figures of that class): prefill tokens/s,
# decode tokens/s for one sequence, decode tokens/s over a batch of 16
PAPER = Throughput(prefill_tok_s=8000, decode_tok_s=35, batch_decode_tok_s=400, batch=16)
CONFIG = {"name": "cost", "model": {"spec": "offline:smollm2", "batch_size": 16, "max_context": 8192},
          "defaults": {"max_new_tokens": 64, "history_budget": 2048},
          "datasets": [{"name": d, "split": "test"} for d in ("locomo", "memdaily", "madial_bench_zh", "madial_bench_en")],
          "strategies": [{"name": s} for s in ("no_memory", "full_history", "stable", "recall_v4", "full_attention")],
          "judge": {"model": "offline:smollm2", "max_context": 8192}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    path = Path(tempfile.mkdtemp()) / "cost.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    checked = preflight([str(path)])
    if checked.problems:
        raise SystemExit("\n".join(checked.problems))
    (_, _, cells), = checked.configs
    per_strategy: dict[str, float] = {}
    questions: dict[str, int] = {}
    for c in cells:
        n = checked.questions[(str(path), c.config_hash)]
        questions[c.dataset.name] = n
        per_strategy[c.strategy.name] = per_strategy.get(c.strategy.name, 0.0) + cell_seconds(c, n, PAPER, PAPER)
    total_q = sum(questions.values())
    print("questions per strategy and model: " + ", ".join(f"{k} {v:,}" for k, v in questions.items()) + f" = {total_q:,}")
    print(f"rates (paper, 1x A100-80GB, 7-8B bf16): prefill {PAPER.prefill_tok_s:,.0f} tok/s, decode "
          f"{PAPER.decode_tok_s:.0f} tok/s alone, {PAPER.batch_decode_tok_s:.0f} tok/s at batch {PAPER.batch}")
    print(f"{'strategy':<16}{'GPU time per model':>20}{'s per question':>16}")
    for name, s in per_strategy.items():
        print(f"{name:<16}{fmt_seconds(s):>20}{s / total_q:>16.2f}")
    model = sum(per_strategy.values())
    print(f"{'one model':<16}{fmt_seconds(model):>20}")
    print(f"{args.models} models x 5 strategies x 4 datasets: {args.models * len(cells):,} cells, "
          f"{args.models * 5 * total_q:,} answers, {model * args.models / 3600:.0f} GPU-hours; "
          f"{model * args.models / 3600 / args.gpus:.1f} h on {args.gpus} GPUs (one process per GPU)")


if __name__ == "__main__":
    main()
