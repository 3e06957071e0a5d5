"""One cell's work: its questions and store, a warm-up with cold caches, and the answers (sharded under accelerate;
each process prepares the scorers on its own answers). Scoring them is `dkilab.eval.scoring.scorers`."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dkilab.eval.data.selection import select_questions
from dkilab.eval.harness import interrupt
from dkilab.eval.harness.experiment import Cell
from dkilab.eval.harness.stores import store_for
from dkilab.eval.scoring.scorers import prepare_all
from dkilab.memory import Embedder
from dkilab.models.oracle import OracleModel
from dkilab.progress import Progress
from dkilab.prompts import CHOOSE
from dkilab.text.lang import detect_language
from dkilab.tracing import tracing_to
from dkilab.types import ChatModel, ConcurrentModel, Conversation, KVModel, Memory, QAItem

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
        convs, items = select_questions(cell.dataset, data_dir)
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
    items = select_questions(cell.dataset, data_dir)[1]
    if cache is not None:
        cache[key] = items
    return items


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
        if isinstance(model, OracleModel):  # scripted:oracle answers from the gold
            model.expect(item, conv)
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
    if model.supports_kv and isinstance(model, KVModel):
        return max(1, int(model.batch_size or 1))
    return max(1, int(model.concurrency or 1)) if isinstance(model, ConcurrentModel) else 1


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
             progress: bool = True, run_id: str | None = None, journal=None, scorers: list | None = None):
    """Answer every question of a cell -> [(index, Answer | error text, wall ms)], error tracebacks,
    {index: trace id} (when `trace`: one trace per question, under the cell's run `run_id`, on every
    process). Shards across processes; the result is complete on the main process. With a `journal`
    (dkilab.eval.tracking.journal) the questions it holds are not asked again and each new answer is saved as it
    finishes. Under several processes every process prepares the `scorers` on its own answers (the judge judges
    them in batches) and what they made is gathered with them, so the main process scores without generating."""
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
        made = []
        if scorers:  # on every process, its own answers: no process waits on one judging them all
            prepare_all(scorers, out, items)
            made = [s.made() for s in scorers]
            print(f"{cell.label}: process {state.process_index} of {state.num_processes} judged its answers "
                  f"({sum(len(m) for m in made)} judge replies)", file=sys.stderr, flush=True)
        _flush_traces(trace)
        if scorers:
            for part in gather_object([made]):
                for s, m in zip(scorers, part):
                    s.take(m)
        out, errors = gather_object(out), gather_object(errors)
        trace_ids = dict(pair for part in gather_object([trace_ids]) for pair in part.items())
    else:
        work(idx)
        _flush_traces(trace)
    out += [(i, answer, wall) for i, (answer, wall) in done.items()]  # answered in an earlier, stopped run
    return sorted(out, key=lambda x: x[0]), errors, trace_ids
