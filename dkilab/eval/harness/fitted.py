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

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from dkilab.cache import file_digest
from dkilab.encoders.adapter import FITTED_ON_FILE
from dkilab.eval.data import load_dataset
from dkilab.eval.data.worksessions import USERS as WORK_USERS
from dkilab.recall.learned import DEFAULT_MODEL
from dkilab.strategies.base import RecallingStrategy

Cell = Any  # dkilab.eval.harness.experiment.Cell (which imports this module)

SEARCHING = ("recall_agent", "semantic_pointer", "peer_engram", "peer_bm25")  # search the store, not through recall
# conversations (users, dialogues) of each registered dataset, in loader order: a split is a half of the
# first `limit` of them (dkilab.eval.data.selection.select_questions)
SIZES = {"locomo": 10, "locomo_sessions": 10, "memdaily": 3000,
         "madial_bench_en": 160, "madial_bench_zh": 160, "worksessions": WORK_USERS}


# the conversations each shipped component was fitted on, by content (`conversation_digest`), so a copy of
# them under another name (a `path:` file) is known too; `scripts/fitted_digests.py` writes it from the data
RECORD = Path(__file__).with_name("fitted_on.json")


@dataclass(frozen=True)
class Fitted:
    name: str  # as the refusal names it
    fitted_on: dict[str, int]  # dataset -> its first N conversations in loader order were fitting data
    applies: Callable[[Cell], bool]  # whether the cell's answers go through it
    stock: str  # what a whole-dataset config uses instead
    record: str  # its entry in fitted_on.json: the digests of the conversations it was fitted on


def conversation_digest(conv) -> str:
    """A conversation by its content: every message's text, in order (names, ids and dates aside)."""
    h = hashlib.sha1()
    for m in conv.messages:
        h.update(m.content.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def _records() -> dict[str, Any]:
    return json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}


def _file_sha1(path: str) -> str | None:
    p = Path(path)
    if not p.is_file():
        return None
    return file_digest(p)


def _learned_fusion(cell: Cell) -> bool:
    """Learned fusion with the shipped model: by default, or named by any path holding the same bytes."""
    recall = getattr(cell.params, "recall", None)
    if not (recall is not None and recall.enabled and recall.signals.fusion == "learned"
            and recall.strategy != "flat_history"):
        return False
    named = recall.signals.fusion_model
    if named is None:
        return True
    shipped = _records().get("fusion", {}).get("sha1") or _file_sha1(str(DEFAULT_MODEL))
    candidates = [Path(named), DEFAULT_MODEL.parents[2] / named]  # as recall.learned.load_model resolves it
    return any(_file_sha1(str(c)) == shipped for c in candidates if c.is_file())


def _searches(cell: Cell) -> bool:
    return isinstance(cell.instance, RecallingStrategy) or cell.strategy.name in SEARCHING


def _adapter(cell: Cell) -> bool:
    """The LoCoMo-dev adapter: `offline:minilm-locomo` (what `auto` resolves English to), or a directory it
    was merged into, under any name (the merge leaves its record there)."""
    model = cell.embedder.model
    return _searches(cell) and (model == "offline:minilm-locomo" or (Path(model) / FITTED_ON_FILE).is_file())


# the dev splits of bench/fusion_train.py's DEV: LoCoMo 0-4, MemDaily's first 300 users' first half,
# MADial-Bench's and the work sessions' first half; the adapter: LoCoMo 0-4 (experiments/bench/finetune_encoder_dev.py)
COMPONENTS = (
    Fitted("the learned fusion model (dkilab/recall/fusion_lr.json)",
           {"locomo": 5, "locomo_sessions": 5, "memdaily": 150, "madial_bench_en": 80, "madial_bench_zh": 80,
            "worksessions": WORK_USERS // 2},
           _learned_fusion, "recall.signals.fusion: weighted", "fusion"),
    Fitted("the encoder adapter offline:minilm-locomo", {"locomo": 5, "locomo_sessions": 5}, _adapter,
           "embedder: {english: offline:minilm}", "adapter"),
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


@lru_cache(maxsize=64)
def _asked_digests(name, path, first, limit, split, data_dir, content) -> dict[str, str]:
    """digest -> conversation id of what a dataset spec selects (memoised by the source files' digest,
    `content`: a sweep's cells share it, an edited file is read again)."""
    half_of = load_dataset(name, data_dir=data_dir, limit=limit and first + limit, path=path)[first:]  # as the spec
    half = (len(half_of) + 1) // 2
    convs = half_of[:half] if split == "dev" else half_of[half:] if split == "test" else half_of
    return {conversation_digest(c): c.conversation_id for c in convs}


def by_content(cell: Cell, data_dir=None) -> list[str]:
    """The cell's one line when a component it uses was fitted on conversations it asks about, recognised by
    their content: a registered dataset, a `path:` copy of one, any split or slice."""
    used = [c for c in COMPONENTS if c.applies(cell) and _records().get(c.record, {}).get("conversations")]
    if not used:
        return []
    d = cell.dataset
    try:
        content = d.info().get("content")
        digests = _asked_digests(d.name, d.path, d.first, d.limit, d.split, data_dir, content)
    except Exception:  # absent or unreadable data is refused by its own check (checks.missing_data)
        return []
    hit = [(c, sorted(digests[d] for d in set(_records()[c.record]["conversations"]) & set(digests)))
           for c in used]
    hit = [(c, ids) for c, ids in hit if ids]
    if not hit:
        return []
    what = "; ".join(f"{c.name}, fitted on {len(ids)} of them ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
                     for c, ids in hit)
    fix = " or ".join(dict.fromkeys(c.stock for c, _ in hit))
    return [f"cell {cell.label} asks about conversations of {d.path or d.name} (split {d.split}) that a fitted "
            f"component was fitted on, matched by content: {what}; ask about held-back conversations, {fix}, "
            f"or purpose: tune for a dev study"]


def problems(cell: Cell, purpose: str = "evaluate", data_dir=None) -> list[str]:
    """The cell's one line, when it would evaluate a fitted component on questions it was fitted on: by the
    registered datasets' spans (no data read), and by content for any other dataset (a `path:` file)."""
    if purpose == "tune" and cell.dataset.split == "dev":
        return []
    span = asked(cell)
    if span is None:
        return by_content(cell, data_dir)
    if span[0] >= span[1]:
        d = cell.dataset
        return [f"cell {cell.label} asks about no conversation: split {d.split} of {d.name}'s conversations "
                f"{d.first}-{d.first + (d.limit or 0) - 1} (first {d.first}, limit {d.limit}) is empty; a split "
                "halves the conversations `first` and `limit` select: raise limit"]
    hit = [(c, c.fitted_on[cell.dataset.name]) for c in COMPONENTS
           if span[0] < min(span[1], c.fitted_on.get(cell.dataset.name, 0)) and c.applies(cell)]
    if not hit:  # a registered dataset's spans are what its digests were taken from: nothing more to read
        return []
    d = cell.dataset
    what = "; ".join(f"{c.name}, fitted on its conversations 0-{k - 1}" for c, k in hit)
    fix = " or ".join(dict.fromkeys(c.stock for c, _ in hit))
    limit = (f", first {d.first}" if d.first else "") + (f", limit {d.limit}" if d.limit else "")
    return [f"cell {cell.label} asks about {d.name} conversations {span[0]}-{span[1] - 1} (split {d.split}{limit}): "
            f"it would evaluate {what}; use split: test or `first:` past them, {fix}, "
            f"or purpose: tune for a dev study"]
