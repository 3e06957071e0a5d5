"""Preparing one cell: its data, its model under test (or tokenizer alone) and its scorers (the strategy
instance gets its K/V budget and response cache when the cell builds it, `Cell.instance`). `prepare_cell` is the
one place a cell is made ready; the models a cell held are released after it (`release_after`), in `model_order`."""
from __future__ import annotations

from typing import Any, Collection

from dkilab.eval.harness import budgets
from dkilab.eval.harness.cell import load_cell_data, question_text
from dkilab.eval.harness.experiment import Cell
from dkilab.eval.scoring.judge import LLMJudge
from dkilab.eval.scoring.scorers import Scorer, scorers_for
from dkilab.models.loading import load_model, load_tokenizer_model, release_models
from dkilab.types import KVModel


class CellFailedOnARank(RuntimeError):
    """A cell could not start on some process (model, data, check); every process agrees and moves on."""


def prepare_cell(cell: Cell, state, data_dir, datasets, max_error_rate: float = 0.0):
    """(model, data, scorers) of a cell: what `run_cell` and `score_rows` take. Under several processes each
    one's failure is gathered, so they all fail the cell together (naming the rank) and go on to the next cell,
    instead of the others waiting in a collective for one that raised."""
    error: str | None = None
    out: tuple[Any, Any, Any] = (None, None, None)
    try:
        data = load_cell_data(cell, data_dir, datasets)  # first: a missing dataset fails before a model loads
        model = cell_model(cell) if cell.needs_model else None
        if model is not None:  # e.g. K/V on an architecture that cannot take it: one clear failure, no error rows
            prefs = any(conv.preferences for conv, _ in data.items)
            cell.instance.check_model(model, preferences=prefs)
            budgets.starved(cell, model, [(q.qid, question_text(q), conv.preferences or []) for conv, q in data.items],
                            max_error_rate)  # counted with its tokenizer, before any question is asked
            if not cell.instance.needs(prefs).kv and isinstance(model, KVModel) and model.model is not None:
                from dkilab.models.kv import stock_attention

                stock_attention(model.model)  # nothing injected: the stock kernel (SDPA fast paths, flash)
        # every process loads the judge like its model (its own GPU) and judges its own answers (run_cell)
        out = (model, data, cell_scorers(cell))
    except Exception as exc:
        if state.num_processes <= 1:
            raise
        error = f"{type(exc).__name__}: {exc}"
    if state.num_processes > 1:
        from accelerate.utils import gather_object

        failed = [(rank, e) for rank, e in gather_object([(state.process_index, error)]) if e]
        if failed:
            raise CellFailedOnARank("; ".join(f"process {rank} (of {state.num_processes}): {e}" for rank, e in failed))
    return out


def model_order(cells: list[Cell]) -> list[int]:
    """Cell indexes in run order: grouped by model spec (first appearance first, config order within), so a
    `model.spec` sweep loads each model once."""
    first: dict[str, int] = {}
    for c in cells:
        first.setdefault(c.model.spec, len(first))
    return sorted(range(len(cells)), key=lambda i: first[cells[i].model.spec])


def release_after(cell: Cell, later: list[Cell], protect: Collection = frozenset()) -> list[str]:
    """Free what the cell held: its strategy's K/V blocks; and, before the next cell loads another model,
    every loaded model no later cell needs (after the last cell the models stay, for the next experiment
    of a notebook or a test session). -> the model specs released."""
    if "instance" in cell.__dict__:  # built (cached_property): a skipped cell never built one
        cell.instance.release()
    if not later or later[0].model.spec == cell.model.spec:
        return []
    return release_models({c.model.spec for c in later if c.needs_model} | {c.judge.model for c in later if c.judge},
                          protect)


def cell_model(cell: Cell):
    """The cell's model: the whole model, or in a context-only cell (`model.generate: false`) its
    tokenizer alone unless the strategy generates while it builds its context (LLM summaries)."""
    m = cell.model
    if m.generate or cell.instance.needs().generates_in_assembly:
        model = load_model(m.spec, **m.load_kwargs())
    else:
        model = load_tokenizer_model(m.spec, **m.load_kwargs())
    return model


def cell_scorers(cell: Cell) -> list[Scorer]:
    """The cell's scorers as its config chooses them (`scorers.scorers_for`), the judge loaded if it has one."""
    judge = make_judge(cell.judge, cell.model) if cell.judge is not None else None
    return scorers_for(scorer=cell.dataset.info()["scorer"], detector=cell.detector, judge=judge,
                       judge_batch=cell.judge.batch_size if cell.judge else 8,
                       imported=cell.instance.needs().answers_from_file, extra=cell.scorers)


def make_judge(spec, model_spec=None):
    """The judge, loaded like the model under test (`model_spec`: its dtype and device) unless the judge
    block sets its own."""
    dtype = spec.dtype or (model_spec.dtype if model_spec is not None else "auto")
    device = spec.device or (model_spec.device if model_spec is not None else "cpu")
    return LLMJudge(load_model(spec.model, max_context=spec.max_context, dtype=dtype, device=device), spec.prompt,
                    spec.max_new_tokens, spec.abstention_prompt, abstention=spec.abstention,
                    protocol=spec.protocol_object(), stress=spec.stress)
