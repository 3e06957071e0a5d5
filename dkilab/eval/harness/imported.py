"""The experiment an import runs (`dkilab import`, `dkilab bench published`): one `imported` strategy per file on
the dataset it answers, and the match of every file against its cells' questions before anything is logged."""
from __future__ import annotations

import re
from pathlib import Path

from dkilab.config import ConfigError
from dkilab.eval.data import load_dataset
from dkilab.eval.data.published import match, read_cached, read_run
from dkilab.eval.harness.cell import load_cell_questions
from dkilab.eval.harness.experiment import check_config


def label_of(path: Path) -> str:
    """A cell label from a predictions file: its folder for a generic name (`gpt-4o-mini-cot/eval_results.json`
    -> gpt-4o-mini-cot), else its stem."""
    generic = {"eval_results", "ap_eval_results_scored", "predictions", "results", "answers"}
    stem = path.parent.name if path.stem in generic and path.parent.name else path.stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-") or "imported"


def import_config(files: list[str], dataset: str, *, name: str | None = None, labels: list[str] | None = None,
                  fmt: str = "auto", answer_model: str | None = None, categories: list[str] | None = None,
                  exclude_audited: str | None = None, max_error_rate: float = 0.0) -> dict:
    """The experiment mapping `dkilab import` runs: one `imported` strategy per file, on `dataset` (restricted to
    `categories` when given; with `exclude_audited`, a second dataset without the audit's wrong golds)."""
    labels = labels or [label_of(Path(f)) for f in files]
    if len(labels) != len(files):
        raise ConfigError(f"--label: {len(labels)} labels for {len(files)} files")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--label: the cells' labels repeat ({', '.join(labels)}): give each file its own")
    ds: dict = {"name": dataset}
    if categories:
        ds["categories"] = [int(c) if str(c).isdigit() else c for c in categories]
    datasets = [ds]
    if exclude_audited:
        datasets.append(ds | {"label": f"{dataset}-audited", "exclude_audited": exclude_audited})
    params = {"format": fmt} | ({"answer_model": answer_model} if answer_model else {})
    return {"name": name or f"imported-{dataset}",
            "description": "published predictions imported with `dkilab import`: " + ", ".join(files),
            "datasets": datasets, "max_error_rate": max_error_rate,
            "strategies": [{"name": "imported", "label": lab, "params": params | {"path": str(Path(f).resolve())}}
                           for f, lab in zip(files, labels)]}


def file_categories(files: list[str], fmt: str = "auto") -> list[str] | None:
    """The categories every prediction of the files names (None when some have none)."""
    cats: set[str] = set()
    for f in files:
        for p in read_run(Path(f), fmt).predictions:
            if p.category is None:
                return None
            cats.add(p.category)
    return sorted(cats, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else 0, c))


def check_import(cfg, data_dir=None, echo=print) -> list[str]:
    """Each imported cell's file matched against its questions before anything is logged: a question text
    that differs is refused (PredictionsError naming the entry); -> what each match left over."""
    lines: list[str] = []
    cache: dict = {}
    for cell in check_config(cfg, "<import>"):
        items = load_cell_questions(cell, data_dir, cache)
        d = cell.dataset
        found = match(read_cached(cell.instance), d.key if d.path else d.name,
                      load_dataset(d.name, data_dir=data_dir, path=d.path), items)
        lines.append(f"{cell.label}: {found.summary(cell.instance.file)}")
    return lines
