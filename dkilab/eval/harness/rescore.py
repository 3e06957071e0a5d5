"""Scoring without generating: every finished cell stores its answers, and a cell whose scoring part alone
changed (a metric added or fixed, another scorer, a judge) is scored again from them, with no model.

A cell run logs `answers.jsonl.gz` (gzip: a LoCoMo cell's contexts are tens of MB as text): a header line
(`{"cell": {...}}`: generation hash, wall seconds, the cell-level counters, the error tracebacks) and one
line per question (`{"i", "qid", "digest", "wall_ms", "answer" | "error", "trace_id"}`; `digest`: the
question's content, dkilab.eval.tracking.journal.question_digest), the whole `Answer`: prediction, prompt, the
context it saw, fact calls, recalled ids, budget, review fields. Whatever a metric reads is in it.

- `dkilab run`: a cell with no finished run for its config hash, but one for its generation hash
  (`Cell.generation_hash`), is re-scored from that run's answers (`rescore_cell`) and logged as a new
  run tagged `dkilab.rescored_from`. The judge, if the config has one, is loaded and judges; the model
  under test is not.
- `dkilab rescore EXPERIMENT`: every cell of the experiment re-scored from its stored answers, whether
  its config changed or not; it says per cell which metrics changed (none, when the code did not).

Feedback on traces is not logged again for a re-scored cell: the traces keep the feedback of the run
that generated them (the rows still carry their `trace_id`).
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dkilab.config import read_yaml
from dkilab.eval.harness.experiment import experiment_from_dict, load_experiment
from dkilab.eval.scoring.scorers import score_rows
from dkilab.eval.tracking.journal import answer_from_json, answer_to_json, question_digest
from dkilab.eval.tracking.runstate import COMPLETE_TAG
from dkilab.eval.tracking.store_uri import tracking_uri
from dkilab.eval.views.report import existing_store, experiment_runs

ANSWERS = "answers.jsonl.gz"
ANSWERS_TAG = "dkilab.answers"  # "1" on a run that logged its answers
GENERATION_TAG = "dkilab.generation_hash"
SCORING_TAG = "dkilab.scoring_hash"
RESCORED_TAG = "dkilab.rescored_from"  # the run whose answers a re-scored run scored
# counters of the generation, carried from the generating run to its re-scored runs
GENERATION_COUNTERS = ("query_embeddings", "resumed_questions", "response_cache_hits", "store_over_window",
                       "store_vectors")


class StoredAnswersError(ValueError):
    """Stored answers that do not fit the cell's questions (the dataset changed) or cannot be read."""


def answers_text(cell, answers, items, trace_ids: dict | None, errors: list[str], wall_s: float,
                 counters: dict[str, float]) -> str:
    """answers.jsonl for a cell: its header line, then one line per question in question order."""
    header = {"cell": {"label": cell.label, "generation_hash": cell.generation_hash, "wall_s": wall_s,
                       "questions": len(answers), "counters": counters, "errors": list(errors)}}
    lines = [json.dumps(header, ensure_ascii=False, default=str)]
    for i, answer, wall in answers:
        rec: dict[str, Any] = {"i": i, "qid": str(items[i][1].qid), "digest": question_digest(items[i][1]),
                               "wall_ms": wall}
        if isinstance(answer, str):
            rec["error"] = answer
        else:
            rec["answer"] = answer_to_json(answer)
        if trace_ids and i in trace_ids:
            rec["trace_id"] = trace_ids[i]
        lines.append(json.dumps(rec, ensure_ascii=False, default=str))
    return "\n".join(lines) + "\n"


def log_answers(cell, answers, items, trace_ids, errors, wall_s: float, counters: dict[str, float]) -> None:
    """On the active run: the answers (ANSWERS) and the tags that find them again (generation and scoring hash)."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ANSWERS
        path.write_bytes(gzip.compress(answers_text(cell, answers, items, trace_ids, errors, wall_s, counters)
                                       .encode("utf-8"), mtime=0))
        mlflow.log_artifact(str(path))
    mlflow.set_tags({ANSWERS_TAG: "1", GENERATION_TAG: cell.generation_hash, SCORING_TAG: cell.scoring_hash})


def read_answers(run_id: str, items: list) -> tuple[list, dict[int, str], dict[str, Any]]:
    """([(i, Answer | error text, wall ms)], {i: trace id}, header) from a run's stored answers, checked
    against the cell's questions: every question answered, each line the same question (qid and content)."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        path = Path(mlflow.MlflowClient().download_artifacts(run_id, ANSWERS))
        return parse_answers(gzip.decompress(path.read_bytes()).decode("utf-8"), items, f"run {run_id}")
    except StoredAnswersError:
        raise
    except Exception as exc:  # noqa: BLE001 - a missing or torn artifact: name the run
        raise StoredAnswersError(f"run {run_id}: cannot read {ANSWERS} ({type(exc).__name__}: {exc})") from None


def parse_answers(text: str, items: list, where: str) -> tuple[list, dict[int, str], dict[str, Any]]:
    """`read_answers` on the text of an answers.jsonl (`where` names it in errors)."""
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    if not lines or "cell" not in lines[0]:
        raise StoredAnswersError(f"{where}: {ANSWERS} has no header line")
    header, out, trace_ids = lines[0]["cell"], [], {}
    for rec in lines[1:]:
        i = int(rec["i"])
        if not 0 <= i < len(items) or str(items[i][1].qid) != rec["qid"]:
            raise StoredAnswersError(f"{where}: stored answer {i} is for question {rec['qid']!r}, which is not "
                                     f"question {i} of the cell now (the dataset changed): run the cell again")
        if rec.get("digest") != question_digest(items[i][1]):
            raise StoredAnswersError(f"{where}: stored answer {i} ({rec['qid']!r}) was given to a question whose "
                                     "text, gold, evidence or choices differ from the cell's now (or were stored "
                                     "without their digest): run the cell again")
        answer = rec["error"] if "error" in rec else answer_from_json(rec["answer"])
        out.append((i, answer, float(rec["wall_ms"])))
        if rec.get("trace_id"):
            trace_ids[i] = rec["trace_id"]
    if len(out) != len(items):
        raise StoredAnswersError(f"{where}: {len(out)} stored answers for {len(items)} questions (the dataset "
                                 "changed): run the cell again")
    return out, trace_ids, header


def answered_runs(experiment_id: str, generation_hash: str | None = None) -> dict[str, Any]:
    """generation hash -> the newest completed cell run that stored its answers (only `generation_hash`'s when
    given)."""
    import mlflow


    only = f" and tags.`{GENERATION_TAG}` = '{generation_hash}'" if generation_hash else ""
    runs = mlflow.MlflowClient().search_runs(
        [experiment_id],
        f"tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED' and tags.`{COMPLETE_TAG}` = '1' "
                         f"and tags.`{ANSWERS_TAG}` = '1'{only}", order_by=["attributes.start_time DESC"],
                         max_results=50000)
    out: dict[str, Any] = {}
    for r in runs:
        out.setdefault(r.data.tags.get(GENERATION_TAG, ""), r)
    return out


def rescore_cell(stored: tuple[list, dict[int, str], dict[str, Any]], items: list, scorers: list) -> list[dict]:
    """A cell's metric rows scored from stored answers (`read_answers`) by the cell's scorers, as `dkilab run`
    scores them (the judge, if any, judges)."""
    answers, trace_ids, _ = stored
    return score_rows(scorers, answers, items, trace_ids)


def changed_metrics(before: dict[str, float], after: dict[str, float]) -> tuple[list[str], list[str], list[str]]:
    """(changed, new, gone) metric names between two runs of a cell, leaving out what times this pass
    (the harness overhead includes the scoring's own time) and the interval bounds."""
    def kept(k: str) -> bool:
        return "overhead" not in k and not k.endswith(("_ci95_low", "_ci95_high"))

    b = {k: v for k, v in before.items() if kept(k)}
    a = {k: v for k, v in after.items() if kept(k)}
    same = lambda x, y: x == y or (x != x and y != y) or abs(x - y) <= 1e-9 * max(1.0, abs(x))  # noqa: E731
    changed = sorted(k for k in a.keys() & b.keys() if not same(a[k], b[k]))
    return changed, sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())


def stored_config(target: str, uri: str | None = None):
    """(ExperimentConfig, where it came from) for `dkilab rescore TARGET`: an experiment YAML, or an
    experiment name, whose config is read from its newest run (experiment.yaml), as it ran."""
    import mlflow


    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        return load_experiment(target), target
    experiment_runs(target, uri)  # the store and the name exist (one-line errors naming them otherwise)
    mlflow.set_tracking_uri(existing_store(tracking_uri(uri)))
    client = mlflow.MlflowClient()
    exp = mlflow.get_experiment_by_name(target)
    assert exp is not None  # experiment_runs checked the name
    parents = client.search_runs([exp.experiment_id], "tags.`dkilab.kind` = 'experiment'",
                                 order_by=["attributes.start_time DESC"], max_results=50)
    for parent in parents:
        try:
            path = client.download_artifacts(parent.info.run_id, "experiment.yaml")
        except Exception:  # noqa: BLE001 - a run stopped before it logged its config: an older one
            continue

        data = read_yaml(path)
        return experiment_from_dict(data, f"experiment.yaml of run {parent.info.run_id}"), \
            f"config of run {parent.info.run_id[:8]}"
    raise StoredAnswersError(f"experiment {target!r} has no run that logged its config (experiment.yaml); pass the "
                             "experiment YAML instead")
