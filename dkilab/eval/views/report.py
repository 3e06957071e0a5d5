"""Reading an experiment back from MLflow (`dkilab report`, notebooks, resume): where the store is, its
finished cells (the newest complete run per cell, in config order), their metrics and per-question rows,
and the report built from them, with notes on the detector and on cells from different invocations."""
from __future__ import annotations

import datetime as dt
import difflib
import json
from pathlib import Path
from typing import Any

from dkilab.eval.scoring.judge_stress import judge_notes
from dkilab.eval.tracking import runstate
from dkilab.eval.tracking.store_uri import (
    SCRIPTED_TAG,
    TrackingStoreError,
    check_server,
    read_metrics,
    run_rows,
    tracking_uri,
)
from dkilab.eval.views.card import CARD_FILE
from dkilab.eval.views.tables import metrics_frame, pairwise


# --- reading back ------------------------------------------------------------------------------
def detector_notes(params_per_cell: list[dict[str, str]]) -> list[str]:
    """One line per abstention detector the cells used: name, version and measured test-half figures."""
    seen: dict[str, dict[str, str]] = {}
    for params in params_per_cell:
        card = {k.removeprefix("metrics.abstention_detector."): v for k, v in params.items()
                if k.startswith("metrics.abstention_detector.")}
        if card:
            seen.setdefault(json.dumps(card, sort_keys=True), card)
    notes = []
    for card in seen.values():
        prefixes = {"test_": "held-out half", "loso_": "leave-one-source-out", "pooled_": "pooled 5-fold",
                    "fresh_": "fresh check", "sample_": "per-source sample"}
        parts = []
        for prefix, label in prefixes.items():
            got = ", ".join(f"{k.removeprefix(prefix)} {v}" for k, v in sorted(card.items()) if k.startswith(prefix))
            if got:
                parts.append(f"{label} {got}")
        name = card.get("name", "?") + (f" ({card['model']})" if card.get("model")
                                        else "") + f"-v{card.get('version', '?')}"
        measured = "; ".join(parts) or card.get("sample_figures") or card.get("test_figures") or "not measured"
        notes.append(
            f"hallucination_rate rests on the abstention detector {name}: {measured} (`dkilab bench abstention`)")
    return notes


class UnknownExperimentError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def existing_store(uri: str) -> str:
    """`uri` if it names an existing store: a SQLite file or file: folder that exists, or a server that
    answers (`/health`, 5 s timeout). Raises TrackingStoreError with one line otherwise."""
    local = runstate.local_store_dir(uri)
    if local is not None:
        path = Path(uri[len("sqlite:///"):]).expanduser() if uri.startswith("sqlite:///") else local
        if not path.exists():
            raise TrackingStoreError(f"no MLflow store at {uri} ({path} does not exist); runs go to "
                                     "$MLFLOW_TRACKING_URI or sqlite:///mlflow/mlflow.db by default")
        return uri
    if uri.startswith(("http://", "https://")):
        check_server(uri)
    return uri


def config_ordered(runs) -> list:
    """Cell runs in the order the config lists them (the `dkilab.cell_index` tag); by start time when
    some runs predate the tag."""
    runs = list(runs)
    idx = [r.data.tags.get("dkilab.cell_index", "") for r in runs]
    if all(i.isdigit() for i in idx):
        return [r for _, r in sorted(zip(idx, runs), key=lambda p: (int(p[0]), p[1].info.start_time))]
    return sorted(runs, key=lambda r: r.info.start_time)


class ScriptedRunsError(ValueError):
    """An experiment's cells ran on a `scripted:` model: its numbers measure the pipeline, not a model."""


def experiment_runs(experiment: str, uri: str | None = None) -> list:
    """The finished cells of an experiment (the newest completed run per cell label) in config order;
    a store that does not exist or an unknown experiment name is a one-line error (did-you-mean)."""
    import mlflow


    uri = existing_store(tracking_uri(uri))
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        names = [e.name for e in mlflow.MlflowClient().search_experiments(max_results=1000) if e.name != "Default"]
        close = difflib.get_close_matches(experiment, names, n=1)
        raise UnknownExperimentError(f"no MLflow experiment named {experiment!r} at {uri}"
                                     + (f"; did you mean {close[0]!r}?" if close else "")
                                     + (f"; experiments there: {', '.join(sorted(names))}" if names
                                        else " (it has none)"))
    return config_ordered(newest_per_cell(runstate.finished_runs(exp.experiment_id).values()))


def methodology(experiment: str, uri: str | None = None) -> dict[str, Any]:
    """The methodology card (`dkilab.eval.views.card`) of the experiment's latest run that logged one; a one-line error
    when the experiment is unknown or no run of it has a card."""
    import mlflow


    experiment_runs(experiment, uri)  # the store and the name, checked with their one-line errors
    exp = mlflow.get_experiment_by_name(experiment)
    assert exp is not None  # experiment_runs refused an unknown name
    parents = mlflow.search_runs(experiment_ids=[exp.experiment_id], filter_string="tags.`dkilab.kind` = 'experiment'",
                                 order_by=["start_time DESC"], output_format="list")
    for run in parents:
        if any(a.path == CARD_FILE for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)):
            return mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{CARD_FILE}")
    raise UnknownExperimentError(f"experiment {experiment!r}: no run has a methodology card ({CARD_FILE}); runs logged "
                                 "before cards existed have none: `dkilab run` it again")


def provenance_notes(runs) -> list[str]:
    """Say when the cells of a comparison come from different invocations, machines or code: scores still
    compare (same questions, same config hash), latencies and throughput only within one run."""
    parents: dict[str, list] = {}
    for r in runs:
        parents.setdefault(r.data.tags.get("mlflow.parentRunId", r.info.run_id), []).append(r)
    hosts = sorted({r.data.tags.get("dkilab.host", "?") for r in runs})
    commits = sorted({r.data.tags.get("mlflow.source.git.commit", "?")[:12] for r in runs})
    if len(parents) < 2 and len(hosts) < 2 and len(commits) < 2:
        return []
    when = sorted(dt.datetime.fromtimestamp(min(x.info.start_time for x in group) / 1000).strftime("%m-%d %H:%M")
                  for group in parents.values())
    parts = [f"{len(parents)} invocations (started {', '.join(when)})"]
    if len(hosts) > 1:
        parts.append(f"{len(hosts)} machines ({', '.join(hosts)})")
    if len(commits) > 1:
        parts.append(f"{len(commits)} code versions ({', '.join(commits)})")
    return [f"note: these cells come from {' and '.join(parts)}. Scores compare (same questions, same config); "
            "latency and throughput compare only between cells of one invocation, which may have run under "
            "different load."]


def newest_per_cell(runs) -> list:
    """One run per cell label: the newest (a config edited between runs leaves older hashes behind, and two
    rows for one label made reports crash and notebooks double-count)."""
    best: dict[str, Any] = {}
    for r in runs:
        cur = best.get(r.info.run_name)
        if cur is None or r.info.start_time > cur.info.start_time:
            best[r.info.run_name] = r
    return list(best.values())


def run_dataset_key(run) -> str:
    """Which cells compare question by question: same dataset, split and file."""
    p = run.data.params
    return (f"{p.get('dataset.name')}:{p.get('dataset.split')}"
            + (f":{p['dataset.path']}" if p.get("dataset.path") not in (None, "None") else ""))


def report(experiment: str, uri: str | None = None, pairs: bool = True, by_category: bool = False,
           metrics: list[str] | None = None, allow_scripted: bool = False):
    """(table with intervals, paired differences, detector notes) of the finished cells of an experiment:
    the newest completed run per config hash, in the order the cells ran. Cells of a `scripted:` model
    are refused unless `allow_scripted` (their outputs come from a file, not a model)."""
    import pandas as pd

    runs = experiment_runs(experiment, uri)
    if not runs:
        return pd.DataFrame(), pd.DataFrame(), []
    scripted = [r.info.run_name for r in runs if r.data.tags.get(SCRIPTED_TAG) == "1"]
    if scripted and not allow_scripted:
        raise ScriptedRunsError(f"{len(scripted)} of {len(runs)} cells of {experiment!r} ran on a scripted model "
                                f"({', '.join(scripted[:3])}{', ...' if len(scripted) > 3 else ''}): their outputs "
                                "come from a file, so they compare pipelines, not models; pass --allow-scripted "
                                "to report them anyway")
    table = metrics_frame([(r.info.run_name, read_metrics(r)) for r in runs], intervals=True, extra=metrics)
    table["questions"] = [r.data.metrics.get("questions") for r in runs]  # n
    notes = detector_notes([r.data.params for r in runs]) if "hallucination_rate" in table.columns else []

    notes = provenance_notes(runs) + notes + judge_notes([(r.info.run_name, read_metrics(r)) for r in runs])
    if not pairs:
        return table, pd.DataFrame(), notes
    keyed = [(r.info.run_name, run_dataset_key(r), run_rows(r.info.run_id)) for r in runs]
    return table, pairwise(keyed, metrics, by_category), notes
