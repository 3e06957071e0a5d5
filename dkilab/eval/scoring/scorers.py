"""Scoring a cell's answers, as components. A `Scorer` sees every answer of the cell first (`prepare`: the judge
generates all its prompts in batches there, the learned abstention detector embeds all replies at once), then
gives each answer its fields (`score`), reading what the scorers before it gave (`found`: the judge's abstention
label reaches the detector, the detector's verdict the metrics). `score_rows` runs a cell's scorers over its
answers, for `dkilab run` and `dkilab rescore` alike.

Which scorers a cell runs follows its config (`scorers_for`): the LLM judge when the experiment has a `judge:`
(its protocol and stress probes are the judge's), the abstention detector, the dataset's scorer with every
declared metric, the published verdicts of an imported file, then the ones the experiment names in `scorers:`
(`register_scorer`; one file each in this package, discovered, as docs/extending.md shows)."""
from __future__ import annotations

import hashlib
import time
from typing import Any, Callable, Protocol, runtime_checkable

from dkilab.eval.scoring.base import abstention_of, score_row
from dkilab.eval.scoring.session import expand_turns, turn_items
from dkilab.registry import Registry
from dkilab.strategies.base import no_call_left
from dkilab.text.abstention.learned import get_detector
from dkilab.types import Answer, QAItem


@runtime_checkable
class Scorer(Protocol):
    name: str
    timed_apart: bool  # its time is its own figure (the judge's), not the harness overhead

    def prepare(self, pairs: list[tuple[QAItem, Answer]]) -> None:
        """See every (question, answer) of the cell (per turn for a dialogue) before any is scored."""

    def score(self, item: QAItem, answer: Answer, found: dict[str, Any]) -> dict[str, Any]:
        """This answer's fields; `found`: what the scorers before this one gave it."""

    def made(self) -> dict:
        """What `prepare` made that the main process needs from another process (the judge's replies)."""

    def take(self, made: dict) -> None:
        """Add what another process's `prepare` made."""


class BaseScorer:
    """Defaults: nothing to prepare, nothing to hand between processes."""
    name = ""
    timed_apart = False

    def prepare(self, pairs: list[tuple[QAItem, Answer]]) -> None:
        pass

    def made(self) -> dict:
        return {}

    def take(self, made: dict) -> None:
        pass


class JudgeScorer(BaseScorer):
    """The LLM judge (`judge.LLMJudge`, under dkilab's prompt or a published protocol, with its stress probes):
    correctness of a generated answer to an answerable question (any reply under LongMemEval's protocol) and,
    if the config asks, its abstention label."""
    name, timed_apart = "judge", True

    def __init__(self, judge, batch_size: int = 8):
        self.judge, self.batch_size = judge, batch_size

    def _judged(self, item, answer) -> bool:
        return answer.kind == "answer" and bool(item.answerable or self.judge.judges_all)

    def texts(self, pairs) -> list[str]:
        """The prompts `score` will send for these answers."""
        judge, out = self.judge, []
        for item, answer in pairs:
            if self._judged(item, answer) and (item.answer is not None or judge.judges_all):
                out.append(judge.judge_text(item, answer.text))
                out += [judge.judge_text(item, probe) for probe in judge.probes(item).values()]
            if judge.abstention:
                out.append(judge.abstention_text(item.question, answer.text))
        return out

    def prepare(self, pairs) -> None:
        self.judge.prefetch(self.texts(pairs), batch_size=self.batch_size)

    def made(self) -> dict:
        return dict(self.judge.replies)

    def take(self, made: dict) -> None:
        self.judge.replies.update(made)

    def score(self, item, answer, found) -> dict[str, Any]:
        judge, out = self.judge, {}
        if self._judged(item, answer):
            out["judge"], out["judge_reply"] = judge.judge(item, answer.text)
            out["judge_unparsed"] = float(out["judge"] is None)
            if judge.judges_all:
                out["judge_all"] = out["judge"]
            out |= judge.judge_probes(item)
        if judge.abstention:
            label, out["abstention_judge_reply"] = judge.abstains(item.question, answer.text)
            out["abstention_judge_unparsed"] = float(label is None)
            if label is not None:
                out["abstained"] = label
        return out


class AbstentionScorer(BaseScorer):
    """Whether a generated answer declines, and which path decided (`abstention_path`: judge, asked, rules,
    learned, final_call): the judge's label where it gave one, else the question rule, else the detector the
    config names (`abstention_detector`)."""
    name = "abstention"

    def __init__(self, detector: str = "hybrid"):
        self.detector = detector

    def prepare(self, pairs) -> None:
        get_detector(self.detector).decide_many([a.text for _, a in pairs])  # the learned part: one batch

    def score(self, item, answer, found) -> dict[str, Any]:
        if answer.kind != "answer":  # a ranking, a context, an agent's output: nothing to decline
            return {}
        abstained, path = abstention_of(item, answer, found.get("abstained"), self.detector)
        return {"abstention_path": path, "_abstention": (abstained, path)}


class MetricsScorer(BaseScorer):
    """The dataset's answer scorer (`SCORERS`: LoCoMo's rules, F1, choices, ...) and every declared metric that
    applies to the answer (`base.score_row`), read with the abstention verdict found before it."""
    name = "metrics"

    def __init__(self, scorer: str = "auto", detector: str = "hybrid"):
        self.scorer, self.detector = scorer, detector

    def score(self, item, answer, found) -> dict[str, Any]:
        return score_row(item, answer, self.scorer, found.get("abstained"), self.detector,
                         abstention=found.get("_abstention"))


class PublishedScorer(BaseScorer):
    """An imported file's own verdicts on each reply (the pipeline's judge, as it counts them): their majority
    (`published_judge`, a tie wrong) and their mean (`published_judge_mean`)."""
    name = "published"

    def score(self, item, answer, found) -> dict[str, Any]:
        v = answer.metadata.get("published_verdicts") or None
        if answer.kind != "answer" or v is None:
            return {}
        return {"published_judge": float(2 * sum(v) > len(v)), "published_judge_mean": sum(v) / len(v)}


# scorers an experiment adds by name (`scorers: [name, ...]`): a class built with the cell's judge (None without
# a `judge:` block; one that needs it declares `needs_judge = True` and the config check refuses it otherwise)
EXTRA_SCORERS: Registry[type] = Registry("cell scorer", discover="dkilab.eval.scoring")


def register_scorer(name: str, *, version: str = "1", needs_judge: bool = False) -> Callable[[type], type]:
    """Class decorator: a scorer an experiment can name in `scorers:`; its name and version enter the scoring
    hash of the cells that name it (and of no other cell)."""

    def deco(cls: type) -> type:
        setattr(cls, "name", name)
        EXTRA_SCORERS.add(name, cls, version=version, needs_judge=needs_judge)
        return cls

    return deco


def scorers_for(*, scorer: str = "auto", detector: str = "hybrid", judge=None, judge_batch: int = 8,
                imported: bool = False, extra: tuple[str, ...] = ()) -> list[Scorer]:
    """A cell's scorers, in the order they run."""
    out: list[Scorer] = [JudgeScorer(judge, judge_batch)] if judge is not None else []
    out += [AbstentionScorer(detector), MetricsScorer(scorer, detector)]
    out += [PublishedScorer()] if imported else []
    return out + [EXTRA_SCORERS[name](judge=judge) for name in extra]


def _base_row(item, conv) -> dict[str, Any]:
    return {"qid": item.qid, "user_id": item.metadata.get("user_id") or conv.user_id, "category": item.category,
            "question": item.question, "gold": item.answer, "answerable": item.answerable,
            "evidence_ids": item.evidence_ids} | (
                {"category_name": item.metadata["category_name"]} if item.metadata.get("category_name") else {})


def pairs_of(answers, items) -> list[tuple[QAItem, Answer]]:
    """(question, answer) per answered question, per turn for a dialogue; error answers left out."""
    return [pair for i, answer, _ in answers if not isinstance(answer, str)
            for pair in expand_turns(items[i][1], answer)]


def prepare_all(scorers: list[Scorer], answers, items) -> None:
    pairs = pairs_of(answers, items)
    for s in scorers:
        s.prepare(pairs)


def score_rows(scorers: list[Scorer], answers, items: list, trace_ids: dict | None = None) -> list[dict[str, Any]]:
    """One metric row per question (per turn for a dialogue), in question order; a traced question's rows carry
    its `trace_id`. The scorers prepare first (what other processes prepared and handed over is not made again)."""
    prepare_all(scorers, answers, items)
    rows: list[dict[str, Any]] = []
    for i, answer, wall in answers:
        conv, item = items[i]
        first = len(rows)
        if isinstance(answer, str):  # the strategy raised: an error row (one per turn of a dialogue: each was asked)
            subs = turn_items(item)
            rows += [_base_row(sub, conv) | {"error": answer, "wall_ms": wall / len(subs)} for sub in subs]
        else:
            parts = expand_turns(item, answer)  # a dialogue answered turn by turn: one row per turn
            total = sum(sum(a.latency_ms.values()) for _, a in parts) or 1.0
            for sub, sub_answer in parts:
                share = wall if len(parts) == 1 else wall * sum(sub_answer.latency_ms.values()) / total
                rows.append(_score_one(scorers, sub, sub_answer, share, conv))
        if trace_ids and i in trace_ids:
            for row in rows[first:]:
                row["trace_id"] = trace_ids[i]
    return rows


def _score_one(scorers: list[Scorer], item, answer, wall: float, conv) -> dict[str, Any]:
    answer = no_call_left(answer)  # a stored or imported reply that is a call is no answer either
    t, apart = time.perf_counter(), 0.0
    found: dict[str, Any] = {}
    for s in scorers:
        ts = time.perf_counter()
        found |= s.score(item, answer, found)
        apart += (time.perf_counter() - ts) * 1000 if s.timed_apart else 0.0
    found.pop("_abstention", None)
    row = _base_row(item, conv) | found | {
        "prediction": answer.text, "recalled_ids": answer.recalled_ids, "wall_ms": wall,
        "prompt_digest": hashlib.sha1(f"{answer.prompt}\n{answer.context_text}".encode()).hexdigest()[:12],
        "fact_call_log": [c.__dict__ for c in answer.fact_calls], "summary_ids": answer.summary_ids,
        "budget": answer.budget.as_dict() if answer.budget is not None else None}
    row |= answer.review  # what a reviewer reads beside the answer, whole
    # harness overhead: what the question cost beyond the strategy's own stages, scoring included, the judge not
    row["overhead_ms"] = max(0.0, wall - sum(answer.latency_ms.values())) + (time.perf_counter() - t) * 1000 - apart
    return row
