"""Every cell's token budget resolved when its config is read, before anything runs.

The matched history budget (`history_budget`) is what every strategy shows the model. A strategy may
keep room beside it (recall_v4's fact segments, follow-ups and constraint: `Strategy.budget_parts`),
and may take a part out of it (the seed's §2.3 accounting). Two cells are refused here, one line each:
- the room does not fit the window beside the full matched budget (its history would be cut to make
  room, so the comparison would not be matched), named with every number;
- a reserve leaves the strategy less than half the matched budget (a starved cell).
The window is `model.max_context` (or `max_prompt_tokens` if lower); the system prompt, template and
question are estimated by the offline token heuristic plus `QUESTION_ALLOWANCE`, so the check is of
the config, not of one question. When the cell starts, once its model is loaded and before it asks
anything, `starved` counts every selected question with the model's own tokenizer (its language's system
prompt, the question as asked, the preferences): a cell with more starved questions than `max_error_rate`
allows is refused there, naming the count and the first such question's parts. At run time `Strategy.budget`
applies the same rule to each question (and to what only a question's own run knows, e.g. the recall agent's
view): a starved question is an error row (`StarvedBudget`, naming every part), counted against
`max_error_rate`, never a silently short cell.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from dkilab.prompts import HISTORY_HEAD, SYSTEM
from dkilab.strategies.base import TEMPLATE_TOKENS, StarvedBudget, language_of, preferences_text
from dkilab.text.tokens import HeuristicTokenCounter

Cell = Any  # dkilab.eval.harness.experiment.Cell (which imports this module)

QUESTION_ALLOWANCE = 48  # tokens of a typical question line (LoCoMo's longest questions are about 40)


@lru_cache(maxsize=1)
def fixed_tokens() -> int:
    """System prompt, history head and chat template (English, the longer), by the offline heuristic."""
    return HeuristicTokenCounter().count_tokens(SYSTEM["en"] + "\n" + HISTORY_HEAD["en"]) + TEMPLATE_TOKENS


def resolve(cell: Cell) -> dict[str, Any]:
    """The cell's budget parts: window, fixed (instructions + question allowance), generation, cap,
    matched (what every strategy gets), room, reserved and history (what this strategy shows)."""
    p = cell.params
    known = [w for w in (cell.model.max_context, getattr(p, "max_prompt_tokens", None)) if w]
    window = min(known) if known else None
    cap = getattr(p, "history_budget", None)
    generation = getattr(p, "max_new_tokens", 0)
    room, reserved = cell.instance.budget_parts()
    fixed = fixed_tokens() + QUESTION_ALLOWANCE
    free = None if window is None else max(0, window - fixed - generation)
    matched = cap if free is None else (free if cap is None else min(free, cap))
    history = None
    if matched is not None:
        history = matched if free is None else min(matched, max(0, free - sum(room.values())))
        history = max(0, history - sum(reserved.values()))
    return {"cell": cell.label, "window": window, "fixed": fixed, "generation": generation, "cap": cap,
            "matched": matched, "room": room, "reserved": reserved, "history": history}


def problems(cell: Cell) -> list[str]:
    """What is wrong with the cell's budget (empty when nothing)."""
    r = resolve(cell)
    out: list[str] = []
    if r["window"] is not None and r["generation"] and r["fixed"] + r["generation"] >= r["window"]:
        out.append(f"cell {r['cell']}: max_new_tokens {r['generation']} + question and instructions ~{r['fixed']} >= "
                   f"window {r['window']} (model.max_context or max_prompt_tokens): no question would fit; lower "
                   "max_new_tokens or raise the window")
        return out
    matched, history = r["matched"], r["history"]
    if matched is None or history is None:
        return out
    room = sum(r["room"].values())
    if room and r["window"] is not None and history + sum(r["reserved"].values()) < matched:
        need = r["fixed"] + matched + room + r["generation"]
        parts = " + ".join(f"{k} {v}" for k, v in r["room"].items())
        fits = max(0, r["window"] - r["fixed"] - room - r["generation"])
        out.append(f"cell {r['cell']}: history {matched} + question and instructions ~{r['fixed']} + {parts} + "
                   f"generation {r['generation']} = {need} tokens > window {r['window']} (model.max_context or "
                   f"max_prompt_tokens): set history_budget to at most {fits} for every strategy, raise the window, "
                   f"or lower recall.fact_call.max_fact_tokens or max_rounds")
    if r["reserved"] and history < matched / 2:
        parts = " + ".join(f"{k} {v}" for k, v in r["reserved"].items())
        out.append(f"cell {r['cell']}: starved: {parts} taken from the matched history budget {matched} leave "
                   f"{history} (< half); turn recall.budget.reserve_from_history off or raise history_budget")
    return out


def starved(cell: Cell, model, questions: list[tuple[str | None, str, list[str]]], max_error_rate: float = 0.0) -> None:
    """Refuse the cell before it asks anything (raises StarvedBudget) when more of its questions than
    `max_error_rate` allows would have their history starved by the strategy's room or reserve, each counted
    as the strategy counts it (`Strategy.budget`, the model's tokenizer): e.g. Chinese questions and
    preferences, which the heuristic above counts as English. `questions`: (id, the question as asked,
    the preferences) of each selected question."""
    room, reserved = cell.instance.budget_parts()
    if not (room or reserved) or model is None:
        return  # without a room or a reserve the history is the matched budget: nothing to starve
    first, count = None, 0
    for qid, asked, preferences in questions:
        lang = language_of(asked)
        try:
            cell.instance.budget(model, asked, lang, preferences_text(preferences, lang), reserved=reserved, room=room)
        except StarvedBudget as exc:
            count += 1
            first = first or f"question {qid} ({lang}): {exc}"
    if count and count > max_error_rate * len(questions):
        raise StarvedBudget(f"cell {cell.label}: {count} of {len(questions)} questions would be starved, counted with "
                            f"{model.name}'s tokenizer (over max_error_rate "
                            f"{max_error_rate:g}), refused before asking any; first {first}")


def table(cells: list[Cell]) -> str:
    """One line per cell: its resolved budget parts (`dkilab run CONFIG --budgets`)."""
    head = (f"{'cell':<44} {'window':>7} {'fixed':>6} {'gen':>5} {'cap':>6} {'matched':>8} {'history':>8}  "
            "room / reserved")
    lines = [head]
    for cell in cells:
        r = resolve(cell)
        extra = ", ".join([*(f"room {k} {v}" for k, v in r["room"].items()),
                           *(f"reserved {k} {v}" for k, v in r["reserved"].items())]) or "-"
        bad = "  REFUSED" if problems(cell) else ""
        lines.append(f"{r['cell']:<44} {_n(r['window']):>7} {r['fixed']:>6} {r['generation']:>5} {_n(r['cap']):>6} "
                     f"{_n(r['matched']):>8} {_n(r['history']):>8}  {extra}{bad}")
    return "\n".join(lines)


def _n(v) -> str:
    return "-" if v is None else str(v)
