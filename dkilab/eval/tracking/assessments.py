"""Per-question assessments on the traces: each question's scores as MLflow feedback and the dataset's gold as
expectations, logged after a cell's questions (`log_pending_assessments`), backfilled after a stopped run."""
from __future__ import annotations

from typing import Any

from dkilab.eval.tracking import runstate
from dkilab.eval.tracking.store_uri import run_rows

# MLflow draws a boolean feedback True as a green check and False as a red cross, so every boolean here
# reads "True = good"; what is neither good nor bad (whether a question was answered, an error's type) is
# a string, which MLflow shows as plain text.
ASSESSED = (  # row field -> feedback name (what the traces table shows as columns); numbers as they are
    ("score", "score"), ("unsupported_claim_rate", "unsupported_claims"),
    ("evidence_in_context", "evidence_in_context"), ("intent_accuracy", "intent_correct"),
    ("l2_state_accuracy", "l2_state_correct"),
)


def _assessments(row: dict) -> list[tuple[str, Any, str | None, str]]:
    """(name, value, rationale, source type) for one row; only what applies to the question."""
    out: list[tuple[str, Any, str | None, str]] = []
    for field, name in ASSESSED:
        v = row.get(field)
        if v is not None and not (isinstance(v, float) and v != v):
            out.append((name, float(v), None, "CODE"))
    if row.get("abstained") is not None:
        out.append(("response", "abstained" if row["abstained"] else "answered", None, "CODE"))
    if row.get("hallucinated") is not None:  # an unanswerable question: abstaining is the good outcome
        out.append(("hallucination_free", not row["hallucinated"],
                    "abstained, as the history holds no answer" if not row["hallucinated"] else
                    "answered although the history holds no answer", "CODE"))
    if row.get("fact_calls"):
        out.append(("fact_call_validity", row.get("valid_calls", 0) / row["fact_calls"],
                    f"{row.get('valid_calls', 0)} of {row['fact_calls']} retrieve_fact calls valid", "CODE"))
    if row.get("judge") is not None:
        out.append(("judge", bool(row["judge"]), str(row.get("judge_reply") or "")[:2000] or None, "LLM_JUDGE"))
    if row.get("error"):
        text = str(row["error"])
        out.append(("error", text.split(":", 1)[0][:200], text[:2000], "CODE"))
    return out


def _expectations(row: dict) -> list[tuple[str, Any]]:
    """The dataset's gold for one question, as MLflow expectations (ground truth, not inputs)."""
    if row.get("answerable") is False:
        return [("expected_behavior", "abstain: the history holds no answer")]
    gold = row.get("gold")
    return [("expected_response", str(gold))] if gold not in (None, "") else []


ASSESSMENTS_TAG = "dkilab.assessments"  # "pending" until a cell's feedback is on its traces, then how many


def log_pending_assessments(experiment_id: str, rows_by_run: dict[str, list[dict]]) -> tuple[int, int]:
    """Put the feedback of every cell run tagged pending on its traces: after the cells, so no process
    of a multi-GPU run waits on the main one writing ~10k assessments per cell. A run this process just
    finished brings its rows; one left pending by a stopped run (Ctrl-C, kill -9) is read back from its
    predictions and only its missing assessments are added. -> (cells, assessments)."""
    import mlflow


    client = mlflow.MlflowClient()
    pending = client.search_runs([experiment_id], f"tags.`{ASSESSMENTS_TAG}` = 'pending'", max_results=50000)
    cells = n = 0
    for run in pending:
        rid, tags = run.info.run_id, run.data.tags
        rows = rows_by_run.get(rid)
        if rows is None:
            if run.info.status == "RUNNING" or runstate.writer_alive(tags):
                continue  # another live process's cell: it logs its own
            try:
                rows = run_rows(rid)
            except Exception:  # noqa: BLE001 - no predictions (the run died before them): nothing to assess
                continue
        logged = log_assessments(rows, only_missing=rid not in rows_by_run)
        client.set_tag(rid, ASSESSMENTS_TAG, str(logged))
        n += logged
        cells += 1
    return cells, n


def log_assessments(rows: list[dict], only_missing: bool = False) -> int:
    """Each traced question's scores as MLflow feedback on its trace (a dialogue's turns: one feedback
    per turn, named by turn, plus their mean). `only_missing`: skip names a trace already carries (a
    backfill after a stopped run). Returns how many were logged."""
    import mlflow
    from mlflow.entities import AssessmentSource

    by_trace: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("trace_id"):
            by_trace.setdefault(row["trace_id"], []).append(row)
    n = 0
    for trace_id, group in by_trace.items():
        items = []
        expected = _expectations(group[0]) if len(group) == 1 else []
        if len(group) == 1:
            items = _assessments(group[0])
        else:  # a dialogue: the mean per measure, and the turn-by-turn values in the rationale
            per: dict[str, list] = {}
            for row in group:
                for name, value, _, _ in _assessments(row):
                    per.setdefault(name, []).append(value)
            for name, vals in per.items():
                if all(isinstance(v, (int, float)) for v in vals):
                    items.append((name, sum(float(v) for v in vals) / len(vals), "per turn: " + ", ".join(
                        str(round(float(v), 3)) for v in vals), "CODE"))
                else:  # text values (response, error): the turns' values in order
                    items.append((name, ", ".join(map(str, vals))[:200], None, "CODE"))
        if only_missing:
            try:
                have = {a.name for a in (mlflow.get_trace(trace_id).info.assessments or [])}
            except Exception:  # noqa: BLE001 - the trace is gone: nothing to attach feedback to
                continue
            items = [it for it in items if it[0] not in have]
            expected = [e for e in expected if e[0] not in have]
        for name, value, rationale, source in items:
            mlflow.log_feedback(trace_id=trace_id, name=name, value=value, rationale=rationale,
                                source=AssessmentSource(source_type=source, source_id="dkilab"))
            n += 1
        for name, value in expected:
            mlflow.log_expectation(trace_id=trace_id, name=name, value=value,
                                   source=AssessmentSource(source_type="HUMAN", source_id="dataset gold"))
            n += 1
    return n
