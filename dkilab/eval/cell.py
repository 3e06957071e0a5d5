"""One cell's work: its questions and store, a warm-up with cold caches, the answers (sharded under
accelerate), and the scored rows (with the LLM judge's labels when the experiment has a judge)."""
from __future__ import annotations

import hashlib
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dkilab.config import ConfigError
from dkilab.eval import interrupt
from dkilab.eval.datasets import dataset_info, load_dataset
from dkilab.eval.datasets.ablation import ablation_split
from dkilab.eval.datasets.locomo_audit import wrong_gold_qids
from dkilab.eval.experiment import Cell
from dkilab.eval.metrics import score_answer
from dkilab.eval.metrics.judge import LLMJudge
from dkilab.eval.metrics.session import expand_turns, turn_items
from dkilab.eval.progress import Progress
from dkilab.eval.stores import store_for
from dkilab.memory import Embedder
from dkilab.models import load_model
from dkilab.prompts import CHOOSE
from dkilab.recall.reference import ReferenceResolver, ReferenceType
from dkilab.strategies.base import no_call_left
from dkilab.text.abstention.learned import get_detector
from dkilab.text.lang import detect_language
from dkilab.tracing import tracing_to
from dkilab.types import ChatModel, Conversation, Memory, QAItem

if TYPE_CHECKING:
    from dkilab.memory.store import MemoryStore
    from dkilab.strategies.base import Strategy


@dataclass
class CellData:
    """A dataset as one cell sees it: the questions to ask and the store holding the histories."""
    items: list[tuple[Conversation, QAItem]]
    store: MemoryStore


def load_cell_data(cell: Cell, data_dir, cache: dict | None = None) -> CellData:
    """Questions and store for the cell's dataset; cells sharing a dataset spec and embedder share one load
    (a failed load is remembered too, so every cell on a missing dataset fails fast with the same error)."""
    key = cell.dataset.model_dump_json() + cell.embedder.model_dump_json()
    if cache is not None and key in cache:
        if isinstance(cache[key], BaseException):
            raise cache[key]
        return cache[key]
    try:
        convs, items = _questions(cell, data_dir)
        label = f"{cell.dataset.name}-{cell.dataset.split}"
        embedder = Embedder(cell.embedder.model, batch_size=cell.embedder.batch_size)
        data = CellData(items, store_for(convs, label, embedder=embedder, index_text=cell.embedder.index_text,
                                         passages=cell.embedder.passages))
    except Exception as exc:
        if cache is not None:
            cache[key] = exc
        raise
    if cache is not None:
        cache[key] = data
    return data


def load_cell_questions(cell: Cell, data_dir, cache: dict | None = None) -> list[tuple[Conversation, QAItem]]:
    """The cell's [(conversation, question)] without building its store (re-scoring needs no store)."""
    key = "questions:" + cell.dataset.model_dump_json()
    loaded = cell.dataset.model_dump_json() + cell.embedder.model_dump_json()
    if cache is not None and isinstance(cache.get(loaded), CellData):
        return cache[loaded].items
    if cache is not None and key in cache:
        return cache[key]
    items = _questions(cell, data_dir)[1]
    if cache is not None:
        cache[key] = items
    return items


def stratified(questions: list, k: int | None) -> list:
    """`k` of `questions`, taken round-robin over their kinds (answerable or not x category, in order of first
    appearance) and returned in their original order: a sample of 2 from a conversation with unanswerable
    questions holds one of them."""
    if k is None or k >= len(questions):
        return list(questions)
    strata: dict[tuple, list[int]] = {}
    for i, q in enumerate(questions):
        strata.setdefault((q.answerable, str(q.category)), []).append(i)
    picked: list[int] = []
    queues = list(strata.values())
    while len(picked) < k:
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return [questions[i] for i in sorted(picked)]


def _questions(cell: Cell, data_dir):
    """[(conversation, question)] of the cell's dataset, after split, languages, categories and limits."""
    d = cell.dataset
    convs = d.conversations(data_dir)
    if d.languages is not None:
        found = sorted({c.language for c in convs})
        convs = [c for c in convs if c.language in d.languages]
        if not convs:
            raise ConfigError(f"datasets ({d.key}): languages: {d.languages} matches no conversation "
                              f"(its languages: {', '.join(found) or 'none'})")
    if d.split == "ablation":
        convs = ablation_split(convs)
    wrong: set[str] = set()
    if d.exclude_audited is not None:  # the golds the public audit finds wrong (eval/datasets/locomo_audit.py)

        wrong = wrong_gold_qids(load_dataset(d.name, data_dir=data_dir), d.audit_path(data_dir))
    cats = None if d.categories is None else {str(c) for c in d.categories}
    refers = _reference_filter() if d.with_reference else None
    out = []
    half = (len(convs) + 1) // 2
    asked = convs[:half] if d.split == "dev" else convs[half:] if d.split == "test" else convs
    for conv in asked:
        qs = [q for q in conv.questions if (cats is None or str(q.category) in cats) and q.qid not in wrong
              and (q.answerable or not d.answerable_only) and (refers is None or refers(q.question))]
        out += [(conv, q) for q in (stratified(qs, d.question_limit) if d.sample == "stratified"
                                    else qs[:d.question_limit])]
    if refers is not None and not out:
        raise ConfigError(
            f"datasets ({d.key}): with_reference: no question of it carries a reference the resolver maps")
    if cats is not None and not out:
        known = sorted({str(q.category) for c in asked for q in c.questions})
        raise ConfigError(f"datasets ({d.key}): categories: {d.categories} matches no question "
                          f"(its categories: {', '.join(known) or 'none'})")
    if not out:  # an empty cell would end FINISHED with nothing measured
        kept = (f"{len(asked)} of {len(convs)} conversations after split {d.split}" if d.split in ("dev", "test")
                else f"{len(convs)} conversations") + (f" from first {d.first}" if d.first else "")
        why = [kept, *(["answerable_only"] if d.answerable_only else []),
               *([f"{len(wrong)} audited golds excluded"] if wrong else [])]
        raise ConfigError(f"datasets ({d.key}): selects no question ({', '.join(why)}); a cell would measure nothing")
    _mark_evidence_sessions(out)

    listed = next((q for _, q in out if q.choices), None)
    if listed is not None and not dataset_info(d.name, d.path).get("choices"):  # CHOOSE would miss the identity
        raise ValueError(f"dataset {d.name!r}: question {listed.qid} has choices, but the dataset is registered "
                         "without choices=True (register_dataset): its cells' identity would miss the CHOOSE prompt")
    return convs, out


def _reference_filter():
    """Whether a question carries a reference the default resolver maps to a scope."""
    resolver = ReferenceResolver()
    return lambda text: resolver.resolve(text).reference_type != ReferenceType.NONE


def _mark_evidence_sessions(items: list) -> None:
    """Each question's gold evidence sessions, for session-level retrieval metrics. It is written to
    the question's metadata, which the harness keeps: a strategy is given only `session_id` and `task`
    (QAItem fields)."""
    sessions: dict[str, dict[str, str]] = {}
    for conv, q in items:
        if q.evidence_ids and "evidence_sessions" not in q.metadata:
            by_id = sessions.setdefault(conv.conversation_id, {m.message_id: m.session_id for m in conv.messages})
            q.metadata["evidence_sessions"] = list(dict.fromkeys(by_id[e] for e in q.evidence_ids if e in by_id))


def warm_up(data: CellData, views: dict) -> None:
    """Load what a first question would otherwise pay for (encoder, each user's index), then empty the
    query caches: every cell measures a warm process with cold caches."""
    embedder = data.store.embedder
    users = list(dict.fromkeys(conv.user_id for conv, _ in data.items))
    for uid in users:
        views.setdefault(uid, data.store.for_user(uid))
        if views[uid].count():
            views[uid].semantic_search("warm up", top_k=1)
            views[uid].lexical_search("warm up", page_size=1)
    embedder.clear_cache()


def question_text(item) -> str:
    """What the strategy is asked: the question, and for multiple choice its options and how to answer
    (without them a model cannot pick a letter and the choice scorer scores nothing)."""
    if not item.choices:
        return item.question

    options = [f"{k}. {v}" for k, v in sorted(item.choices.items())]
    return "\n".join([item.question, *options, CHOOSE[detect_language(item.question)]])


def _answer(strategy: Strategy, item: QAItem, conv: Conversation, memory: Memory, model: ChatModel | None
            ) -> tuple[Any, float, str | None]:
    """(Answer or None, wall ms, traceback text or None): one question, an exception caught as data."""
    t = time.perf_counter()
    try:
        if (expect := getattr(model, "expect", None)) is not None:  # scripted:oracle answers from the gold
            expect(item, conv)
        answer = strategy.answer(question_text(item), memory, model, session_id=item.session_id,
                                 preferences=conv.preferences or None, asked_at=item.question_date,
                                 task=item.task)
        return answer, (time.perf_counter() - t) * 1000, None
    except Exception as exc:  # one bad question must not stop the sweep
        err = f"--- {item.qid}: {item.question}\n{traceback.format_exc()}"
        return f"{type(exc).__name__}: {exc}", (time.perf_counter() - t) * 1000, err


def in_flight(model: ChatModel | None, strategy: Strategy, preferences: bool = True) -> int:
    """Questions answered at once: an endpoint's `concurrency`, a local model's `batch_size` (text and
    K/V generations alike: questions with different memory blocks decode together, `models.kv_batch`)."""
    if model is None:
        return 1
    if getattr(model, "supports_kv", False):
        return max(1, int(getattr(model, "batch_size", 1) or 1))
    return max(1, int(getattr(model, "concurrency", 1) or 1))


def _flush_traces(trace: bool) -> None:
    """MLflow exports traces in the background: they must be in the store before their questions'
    assessments are logged (and, under accelerate, before the main process reads them)."""
    if trace:
        import mlflow

        mlflow.flush_trace_async_logging(terminate=False)


def trace_tags(cell: Cell, item) -> dict[str, str]:
    """What the traces table filters on: strategy, dataset, category, answerable, cell label, question
    (the config hash is on the run the trace belongs to)."""
    return {"cell": cell.label, "strategy": cell.strategy.name, "dataset": cell.dataset.name,
            "category": str(item.category), "answerable": str(bool(item.answerable)).lower(), "qid": str(item.qid)}


class _Stopped(Exception):
    """A queued question not started because another one was interrupted (never reaches the caller:
    results are read in order, so the interruption is raised first)."""


def run_cell(cell: Cell, model: ChatModel | None, data: CellData, state=None, trace: bool = False,
             progress: bool = True, run_id: str | None = None, journal=None, judge=None, judge_batch: int = 8):
    """Answer every question of a cell -> [(index, Answer | error text, wall ms)], error tracebacks,
    {index: trace id} (when `trace`: one trace per question, under the cell's run `run_id`, on every
    process). Shards across processes; the result is complete on the main process. With a `journal`
    (dkilab.eval.journal) the questions it holds are not asked again and each new answer is saved as it
    finishes. With a `judge` under several processes every process judges its own answers (in batches)
    and the replies are gathered with them, so the main process scores without generating."""
    items = data.items
    views: dict[str, Any] = {}
    strategy = cell.instance
    main = state is None or state.is_main_process
    done = journal.load(items) if journal is not None else {}
    warm_up(data, views)
    out, errors, trace_ids = [], [], {}

    stop = threading.Event()  # set by a question that raised Ctrl-C / SystemExit: start no further question

    def one(i):
        if stop.is_set():
            raise _Stopped(i)
        try:
            return answer_one(i)
        except BaseException as e:
            if not isinstance(e, Exception):
                stop.set()  # the pool's other workers would otherwise go on starting queued questions
            raise

    def answer_one(i):
        conv, item = items[i]
        memory = views.setdefault(conv.user_id, data.store.for_user(conv.user_id))
        if trace:
            import mlflow


            with tracing_to(mlflow), mlflow.start_span(name=f"question {item.qid}", span_type="CHAIN",
                                                       run_id=run_id) as s:
                # the gold answer is an MLflow expectation on the trace (logged with the feedback), not an input
                s.set_inputs({"question": item.question, "strategy": cell.label})
                mlflow.update_current_trace(tags=trace_tags(cell, item), user=str(conv.user_id))
                answer, wall, err = _answer(strategy, item, conv, memory, model)
                s.set_outputs({"prediction": getattr(answer, "text", None), "error": err and answer})
            trace_ids[i] = s.trace_id
        else:
            answer, wall, err = _answer(strategy, item, conv, memory, model)
        return i, answer, wall, err

    workers = in_flight(model, strategy, preferences=any(conv.preferences for conv, _ in items))

    def work(my_idx):
        bar = Progress(len(my_idx), cell.label, enabled=progress and main)
        if workers > 1:  # questions in flight together: an endpoint's concurrency or a local model's batch

            pool = ThreadPoolExecutor(workers, thread_name_prefix="dkilab-question")
            try:
                for res in pool.map(one, my_idx):
                    collect(res, bar)
            finally:  # Ctrl-C or an error: drop the questions not started instead of answering them all first
                pool.shutdown(wait=False, cancel_futures=True)
        else:
            for i in my_idx:
                collect(one(i), bar)
        bar.close()

    def collect(res, bar):
        interrupt.check()  # a Ctrl-C that Python swallowed stops the cell here
        i, answer, wall, err = res
        out.append((i, answer, wall))
        if err:
            errors.append(err)
        elif journal is not None:
            journal.append(i, items[i][1], answer, wall)
        bar.update(1)

    idx = [i for i in range(len(items)) if i not in done]
    if state is not None and state.num_processes > 1:
        from accelerate.utils import gather_object

        with state.split_between_processes(idx) as mine:
            work(mine)
        replies = {}
        if judge is not None:  # on every process, its own answers: no process waits on one judging them all
            made = judge.prefetch(judge_texts(judge, out, items), batch_size=judge_batch)
            replies = judge.replies
            print(f"{cell.label}: process {state.process_index} of {state.num_processes} judged its answers "
                  f"({made} judge replies)", file=sys.stderr, flush=True)
        _flush_traces(trace)
        if judge is not None:
            for part in gather_object([replies]):
                judge.replies.update(part)
        out, errors = gather_object(out), gather_object(errors)
        trace_ids = dict(pair for part in gather_object([trace_ids]) for pair in part.items())
    else:
        work(idx)
        _flush_traces(trace)
    out += [(i, answer, wall) for i, (answer, wall) in done.items()]  # answered in an earlier, stopped run
    return sorted(out, key=lambda x: x[0]), errors, trace_ids


def score_cell(cell: Cell, answers, items: list, judge=None, trace_ids: dict | None = None,
               judge_batch: int = 8) -> list[dict[str, Any]]:
    """One metric row per question (per turn for a dialogue), in question order (the judge, if any,
    labels answers first); a traced question's rows carry its `trace_id`."""
    scorer = cell.dataset.info()["scorer"]
    rows: list[dict[str, Any]] = []
    if judge is not None:  # every judge prompt of the cell generated in batches first, not one call per row
        judge.prefetch(judge_texts(judge, answers, items), batch_size=judge_batch)

    detector = get_detector(cell.detector)
    detector.decide_many([a.text for _, a, _ in answers if not isinstance(a, str)])  # the learned one: one batch
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
                rows.append(_score_one(sub, sub_answer, share, conv, scorer, judge, cell.detector))
        if trace_ids and i in trace_ids:
            for row in rows[first:]:
                row["trace_id"] = trace_ids[i]
    return rows


def _base_row(item, conv) -> dict[str, Any]:
    return {"qid": item.qid, "user_id": item.metadata.get("user_id") or conv.user_id, "category": item.category,
            "question": item.question, "gold": item.answer, "answerable": item.answerable,
            "evidence_ids": item.evidence_ids} | (
                {"category_name": item.metadata["category_name"]} if item.metadata.get("category_name") else {})


def _score_one(item, answer, wall: float, conv, scorer: str, judge, detector: str = "hybrid") -> dict[str, Any]:
    base = _base_row(item, conv)
    answer = no_call_left(answer)  # a stored or imported reply that is a call is no answer either
    t = time.perf_counter()
    verdicts = judge_answer(judge, item, answer) if judge is not None else {}
    judge_ms = verdicts.pop("judge_ms", 0.0)
    row = base | score_answer(item, answer, scorer, verdicts.get("abstained"), detector) | verdicts | {
        "prediction": answer.text, "recalled_ids": answer.recalled_ids, "wall_ms": wall,
        "prompt_digest": hashlib.sha1(f"{answer.prompt}\n{answer.context_text}".encode()).hexdigest()[:12],
        "fact_call_log": [c.__dict__ for c in answer.fact_calls], "summary_ids": answer.summary_ids,
        "budget": answer.budget.as_dict() if answer.budget is not None else None}
    row |= answer.review  # what a reviewer reads beside the answer, whole
    # harness overhead: what the question cost beyond the strategy's own stages, scoring included
    row["overhead_ms"] = max(0.0, wall - sum(answer.latency_ms.values())) + (time.perf_counter() - t) * 1000 - judge_ms
    return row


def _judged(judge, item, answer) -> bool:
    """Whether the judge checks this answer: a generated answer to an answerable question; under LongMemEval's
    protocol any generated reply (an abstention question's too)."""
    return answer.kind == "answer" and bool(item.answerable or judge.judges_all)


def judge_texts(judge, answers, items) -> list[str]:
    """The prompts `judge_answer` will send for these answers (per turn for a dialogue)."""
    texts = []
    for i, answer, _ in answers:
        if isinstance(answer, str):
            continue
        for sub, sub_answer in expand_turns(items[i][1], answer):
            if _judged(judge, sub, sub_answer) and (sub.answer is not None or judge.judges_all):
                texts.append(judge.judge_text(sub, sub_answer.text))
                texts += [judge.judge_text(sub, probe) for probe in judge.probes(sub).values()]
            if judge.abstention:
                texts.append(judge.abstention_text(sub.question, sub_answer.text))
    return texts


def judge_answer(judge, item, answer) -> dict[str, Any]:
    """The LLM judge's fields for one answer: correctness (`judge`, 1/0/None) and, if asked, abstention."""
    t = time.perf_counter()
    out: dict[str, Any] = {}
    if _judged(judge, item, answer):
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
    out["judge_ms"] = (time.perf_counter() - t) * 1000
    return out


def make_judge(spec, model_spec=None):
    """The judge, loaded like the model under test (`model_spec`: its dtype and device) unless the judge
    block sets its own."""
    dtype = spec.dtype or (model_spec.dtype if model_spec is not None else "auto")
    device = spec.device or (model_spec.device if model_spec is not None else "cpu")
    return LLMJudge(load_model(spec.model, max_context=spec.max_context, dtype=dtype, device=device), spec.prompt,
                    spec.max_new_tokens, spec.abstention_prompt, abstention=spec.abstention,
                    protocol=spec.protocol_object(), stress=spec.stress)
