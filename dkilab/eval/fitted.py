"""Fitted components and the splits they were fitted on: a cell that would evaluate one on its own
training questions is refused when the config is read, naming the component and the split.

A dataset's `dev` split is the first half of its conversations (LoCoMo: 0-4), `test` the second; `full`
and `ablation` hold both halves, so they contain the fitted questions too. A config that tunes on dev by
design says so (`purpose: tune`): its cells may use `split: dev`, never `full`, and its figures are not
held-back results. The abstention detector is fitted on phrasings the project wrote
(`datasets/fixtures/abstention/`: hand-written, templated, hard negatives), never on replies to a dataset's
questions: the quickstart model's replies to the fixtures are held back (bench/abstention_train.HELD_BACK), so
it constrains no split (`DETECTOR_SOURCES` says which sources may train it; a test holds the weights to it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dkilab.eval.datasets.worksessions import USERS as WORK_USERS
from dkilab.strategies.base import RecallingStrategy

Cell = Any  # dkilab.eval.experiment.Cell (which imports this module)

SEARCHING = ("recall_agent", "semantic_pointer", "peer_engram", "peer_bm25")  # search the store, not through recall
# conversations (users, dialogues) of each registered dataset, in loader order: a split is a half of the
# first `limit` of them (dkilab.eval.cell._questions)
SIZES = {"locomo": 10, "memdaily": 3000, "madial_bench_en": 160, "madial_bench_zh": 160, "worksessions": WORK_USERS}


@dataclass(frozen=True)
class Fitted:
    name: str  # as the refusal names it
    fitted_on: dict[str, int]  # dataset -> its first N conversations in loader order were fitting data
    applies: Callable[[Cell], bool]  # whether the cell's answers go through it
    stock: str  # what a whole-dataset config uses instead


def _learned_fusion(cell: Cell) -> bool:
    recall = getattr(cell.params, "recall", None)
    return (recall is not None and recall.enabled and recall.signals.fusion == "learned"
            and recall.signals.fusion_model is None and recall.strategy != "flat_history")


def _searches(cell: Cell) -> bool:
    return isinstance(cell.instance, RecallingStrategy) or cell.strategy.name in SEARCHING


def _adapter(cell: Cell) -> bool:
    return _searches(cell) and cell.embedder.model == "offline:minilm-locomo"  # resolved by the data's language


# the dev splits of bench/fusion_train.py's DEV: LoCoMo 0-4, MemDaily's first 300 users' first half,
# MADial-Bench's and the work sessions' first half; the adapter: LoCoMo 0-4 (experiments/bench/finetune_encoder_dev.py)
COMPONENTS = (
    Fitted("the learned fusion model (dkilab/recall/fusion_lr.json)",
           {"locomo": 5, "memdaily": 150, "madial_bench_en": 80, "madial_bench_zh": 80,
            "worksessions": WORK_USERS // 2},
           _learned_fusion, "recall.signals.fusion: weighted"),
    Fitted("the encoder adapter offline:minilm-locomo", {"locomo": 5}, _adapter,
           "embedder: {english: offline:minilm}"),
)


# the kinds of source the abstention detector may be fitted on (the prefix of each `trained_on` key of
# dkilab/text/abstention/lr.json): phrasings written for it, none of them a reply to a dataset's question
DETECTOR_SOURCES = ("handwritten", "templated:", "hard:")


def asked(cell: Cell) -> tuple[int, int] | None:
    """[first, end) of the conversations the cell asks about, in loader order (None: not a registered set)."""
    d = cell.dataset
    size = SIZES.get(d.name) if d.path is None else None
    if size is None:
        return None
    n = max(0, min(d.limit, size - d.first) if d.limit else size - d.first)
    half = (n + 1) // 2
    lo, hi = (0, half) if d.split == "dev" else (half, n) if d.split == "test" else (0, n)
    return d.first + lo, d.first + hi


def problems(cell: Cell, purpose: str = "evaluate") -> list[str]:
    """The cell's one line, when it would evaluate a fitted component on questions it was fitted on."""
    span = asked(cell)
    if span is None or (purpose == "tune" and cell.dataset.split == "dev"):
        return []
    hit = [(c, c.fitted_on[cell.dataset.name]) for c in COMPONENTS
           if span[0] < c.fitted_on.get(cell.dataset.name, 0) and c.applies(cell)]
    if not hit:
        return []
    d = cell.dataset
    what = "; ".join(f"{c.name}, fitted on its conversations 0-{k - 1}" for c, k in hit)
    fix = " or ".join(dict.fromkeys(c.stock for c, _ in hit))
    limit = (f", first {d.first}" if d.first else "") + (f", limit {d.limit}" if d.limit else "")
    return [f"cell {cell.label} asks about {d.name} conversations {span[0]}-{span[1] - 1} (split {d.split}{limit}): "
            f"it would evaluate {what}; use split: test or `first:` past them, {fix}, "
            f"or purpose: tune for a dev study"]
