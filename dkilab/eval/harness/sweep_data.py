"""Sweep values checked against the data before anything runs: a per-message summary threshold only
matters through the messages whose length falls between two values, so the length distribution of each
dataset's messages (in the model's tokens) is printed when such a sweep is read, and two thresholds that
summarise exactly the same messages are refused (a sweep point that changes nothing is a bug)."""
from __future__ import annotations

import bisect
from collections.abc import Callable

from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import Cell, ExperimentConfig
from dkilab.eval.scoring.base import percentile
from dkilab.models.loading import load_tokenizer_model

THRESHOLD = "recall.summary.per_message_threshold"
NEAR = 0.01  # thresholds whose summaries differ on fewer than 1% of the messages: said, not refused


def message_lengths(cell: Cell, data_dir=None) -> list[int]:
    """Token lengths of every message of the cell's dataset, sorted (the model's tokenizer, no weights)."""
    d = cell.dataset
    convs = d.conversations(data_dir)
    counter = load_tokenizer_model(cell.model.spec, **cell.model.load_kwargs())
    return sorted(counter.count_tokens(m.content) for c in convs for m in c.messages)


def check_thresholds(cfg: ExperimentConfig, cells: list[Cell], data_dir=None, source: str = "<config>",
                     echo: Callable[[str], None] = print) -> None:
    keys = [k for k in cfg.sweep if k.endswith(THRESHOLD)]
    if not keys:
        return
    seen: dict[tuple, list[int]] = {}
    for key in keys:
        values = sorted({v for v in cfg.sweep[key] if isinstance(v, (int, float))})
        for cell in cells:
            if key not in cell.point:
                continue
            ident = (cell.dataset.model_dump_json(), cell.model.spec)
            if ident in seen:
                continue
            lengths = seen[ident] = message_lengths(cell, data_dir)
            if not lengths:
                continue
            n = len(lengths)
            above = {v: n - bisect.bisect_right(lengths, v) for v in values}
            echo(f"{cell.dataset.key}: {n} messages, tokens p10 {percentile(lengths, 10)} / p50 "
                 f"{percentile(lengths, 50)} / p90 {percentile(lengths, 90)} / p99 {percentile(lengths, 99)} / max "
                 f"{lengths[-1]}; summarised at "
                 + ", ".join(f"{v}: {above[v]} ({above[v] / n:.1%})" for v in values))
            for a, b in zip(values, values[1:]):
                between = above[a] - above[b]
                if between == 0:
                    raise ConfigError(f"{source}: sweep.{key}: {a} and {b} summarise the same messages of "
                                      f"{cell.dataset.key} (none has {a + 1}-{b} tokens): pick values from the "
                                      "distribution above")
                if between < NEAR * n:
                    echo(f"note: sweep.{key}: {a} and {b} differ on {between} of {n} messages of "
                         f"{cell.dataset.key} ({between / n:.1%}): nearly the same cell")
