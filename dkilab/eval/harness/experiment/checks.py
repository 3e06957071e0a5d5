"""The load-time checks of an experiment that need the registries: every key, metric, model spec, sweep point
and budget, one-line errors naming the file and key."""
from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from dkilab.config import ConfigError
from dkilab.encoders.embedder import OFFLINE_EMBEDDERS
from dkilab.eval.data import DATASETS, DatasetNotFoundError, dataset_available, load_dataset, resolve_path
from dkilab.eval.harness.budgets import problems
from dkilab.eval.harness.experiment.identity import Cell, expand_cells
from dkilab.eval.harness.experiment.schema import SWEEP_ROOTS, EmbedderSpec, ExperimentConfig, ModelSpec
from dkilab.eval.harness.fitted import problems as on_fitted
from dkilab.eval.scoring import declared
from dkilab.eval.scoring.scorers import EXTRA_SCORERS
from dkilab.eval.tracking.runstate import CLAIM_PREFIX
from dkilab.models.oracle import SPEC
from dkilab.models.specs import (
    MODELS,
    OFFLINE_SPECS,  # a dict: importing it loads no model and no torch
)
from dkilab.registry import did_you_mean
from dkilab.strategies import STRATEGIES


def check_config(cfg: ExperimentConfig, source: str = "<config>", budgets: bool = True) -> list["Cell"]:
    """Every check that needs the registries, then every cell's params and (with `budgets`) token budget
    (dkilab.eval.harness.budgets): -> the cells, or ConfigError."""

    def fail(key: str, msg: str):
        raise ConfigError(f"{source}: {key}: {msg}")


    if cfg.name.startswith(CLAIM_PREFIX):
        fail("name",
             f"{cfg.name!r}: names starting with {CLAIM_PREFIX!r} are dkilab's cell claims (`dkilab run --claim`)")

    for i, s in enumerate(cfg.strategies):
        if s.name not in STRATEGIES:
            fail(f"strategies.{i}.name", f"unknown strategy {s.name!r}{did_you_mean(s.name, STRATEGIES)}; "
                                         f"registered: {', '.join(STRATEGIES.names())}")
    keys = [s.key for s in cfg.strategies]
    for i, k in enumerate(keys):
        if "@" in k:  # a cell is labelled <strategy label>@<dataset>: the `@` would make it ambiguous
            fail(f"strategies.{i}.label", f"{k!r}: a label may not contain '@'")
    if len(set(keys)) != len(keys):
        fail("strategies", f"labels must be unique, got {keys} (give repeated strategies a label)")
    fields = {s.key: STRATEGIES[s.name].Params.model_fields for s in cfg.strategies}
    every = sorted({f for fs in fields.values() for f in fs})
    for k in cfg.defaults:
        if not any(k in fs for fs in fields.values()):
            fail(f"defaults.{k}", f"no strategy of this experiment has a parameter {k!r}{did_you_mean(k, every)}")
    for key, values in cfg.sweep.items():
        root, _, rest = key.partition(".")
        if root not in (*SWEEP_ROOTS, *keys) or not rest:
            fail(f"sweep.{key}", f"a sweep key is params.<param>, model.<field>, embedder.<field> or "
                                 f"<strategy label>.<param> (labels: {', '.join(keys)})")
        if not isinstance(values, list) or not values:
            fail(f"sweep.{key}", "needs a list of at least one value")
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            fail(f"sweep.{key}", f"repeats {repeated[0]!r}: each value is one cell, so a repeat would run nothing new")
        first = rest.split(".")[0]
        if root == "params" and not any(first in fs for fs in fields.values()):
            fail(f"sweep.{key}",
                 f"no strategy of this experiment has a parameter {first!r}{did_you_mean(first, every)}")
        if root in keys and first not in fields[root]:
            fail(f"sweep.{key}", f"strategy {root!r} has no parameter {first!r}{did_you_mean(first, fields[root])}")
        specs: dict[str, type[BaseModel]] = {"model": ModelSpec, "embedder": EmbedderSpec}
        spec_model = specs.get(root)
        if spec_model is not None and first not in spec_model.model_fields:
            fail(f"sweep.{key}", f"{root} has no field {first!r}; fields: {', '.join(spec_model.model_fields)}")
        if root == "model" and first in ModelSpec.RUNTIME:
            fail(f"sweep.{key}", f"model.{first} is how the model runs, not what it computes (not part of a cell's "
                                 "identity): every value would be the same cell; set it once under `model:`")
    datasets = {d.key for d in cfg.datasets}
    for i, st in enumerate(cfg.strategies):
        for d in st.datasets or []:
            if d not in datasets:
                fail(f"strategies.{i}.datasets", f"no dataset labelled {d!r}{did_you_mean(d, datasets)}")
    for label, ranges in cfg.expect.items():
        strategy, _, dataset = label.partition("@")  # `label` or `label@dataset`
        if strategy not in keys:
            fail(f"expect.{label}", f"no strategy with that label{did_you_mean(strategy, keys)}")
        if dataset and dataset not in datasets:
            fail(f"expect.{label}", f"no dataset {dataset!r} in this experiment{did_you_mean(dataset, datasets)}")
        for metric, (lo, hi) in ranges.items():
            if lo > hi:
                fail(f"expect.{label}.{metric}", f"empty range [{lo}, {hi}]")
            check_metric_name(metric, f"expect.{label}.{metric}", fail)
    check_model_spec(cfg.model.spec, "model.spec", fail)
    check_embedder(cfg.embedder, "embedder", fail)
    for v in cfg.sweep.get("embedder.model", []):
        check_embedder(EmbedderSpec(model=v), "sweep.embedder.model", fail)
    for i, st in enumerate(cfg.strategies):
        if st.embedder:
            check_embedder(cfg.embedder.model_copy(update=st.embedder), f"strategies.{i}.embedder", fail)
    for v in cfg.sweep.get("model.spec", []):
        check_model_spec(v, "sweep.model.spec", fail)
    if cfg.judge is not None:
        check_model_spec(cfg.judge.model, "judge.model", fail)
    for i, name in enumerate(cfg.scorers):
        if name not in EXTRA_SCORERS:
            fail(f"scorers.{i}", f"unknown scorer {name!r}{did_you_mean(name, EXTRA_SCORERS)}; registered: "
                                 f"{', '.join(EXTRA_SCORERS.names()) or 'none'}")
        if EXTRA_SCORERS.meta(name).get("needs_judge") and cfg.judge is None:
            fail(f"scorers.{i}", f"scorer {name!r} asks the LLM judge: add a judge: block")
    if len(set(cfg.scorers)) < len(cfg.scorers):
        fail("scorers", "a scorer is named twice")
    cells = expand_cells(cfg, source)
    for cell in cells:
        if not cfg.model.generate and cell.needs_model and not cell.instance.needs().context_only:
            fail(f"strategies ({cell.strategy.key})", f"strategy {cell.strategy.name!r} has no context-only mode "
                 "(model.generate: false): it generates inside its own flow; run it in a config that generates")
        check_live_sweep(cell, fail)

    leaks = [line for cell in cells for line in on_fitted(cell, cfg.purpose)]
    if leaks:
        raise ConfigError("\n".join(f"{source}: split: {line}" for line in leaks))
    if budgets:
        found = [line for cell in cells for line in problems(cell)]
        if found:
            raise ConfigError("\n".join(f"{source}: budget: {line}" for line in found))
    return cells


# what a cell logs besides the declared metrics (dkilab.eval.tracking.runs.cell_metrics, the runner's counters)
CELL_LEVEL_METRICS = ("questions_per_minute", "query_embeddings", "resumed_questions", "response_cache_hits",
                      "store_over_window", "store_vectors")


def check_metric_name(metric: str, key: str, fail) -> None:
    """`expect` names a metric a cell logs: a declared one (dkilab.eval.scoring), its interval bounds, or a
    cell-level count; anything else would only be found missing after the run."""
    known = {m.name for m in declared()} | set(CELL_LEVEL_METRICS)
    base = metric.removesuffix("_ci95_low").removesuffix("_ci95_high")
    if base not in known:
        fail(key, f"unknown metric {metric!r}{did_you_mean(metric, sorted(known))}"
                  "; the metrics: docs/experiments.md")


def check_embedder(spec: "EmbedderSpec", key: str, fail) -> None:
    """An encoder is `auto`, one of the offline builds, a local directory or a hub id: an `offline:` name that
    is none of the builds, or another `scheme:`, would fail only when the first store is built."""
    for name, value in (("model", spec.model), ("english", spec.english)):
        if value is None or value == "auto" or value in OFFLINE_EMBEDDERS or Path(value).exists():
            continue
        if value.startswith("offline:") or re.match(r"[A-Za-z][\w+.-]*:(?!//)", value):
            fail(f"{key}.{name}" if name == "english" or key == "embedder" else key,
                 f"unknown encoder {value!r}{did_you_mean(value, OFFLINE_EMBEDDERS)}; known: auto, "
                 f"{', '.join(OFFLINE_EMBEDDERS)}, a local directory or a hub id")


def _oracle_spec() -> str:
    return SPEC


def check_model_spec(spec, key: str, fail) -> None:
    """`scheme:rest` must name a registered loader (`nosuch:model` would otherwise be tried as a hub id
    in every cell); specs without a scheme (hub ids, directories, .gguf files) are checked when loaded."""
    if not isinstance(spec, str) or not spec.strip():
        fail(key, f"a model spec is a non-empty string, got {spec!r}")
    m = re.match(r"([A-Za-z][\w+.-]*):(?!//)", spec)
    if m and not Path(spec).exists() and m.group(1) not in MODELS:
        fail(key, f"unknown model loader {m.group(1)!r} in {spec!r}{did_you_mean(m.group(1), MODELS.names())}; "
                  f"registered: {', '.join(MODELS.names())} (or a hub id, a directory, a .gguf file)")
    elif m and m.group(1) == "openai":
        name, _, url = spec[len("openai:"):].partition("@")
        if not name or not url:
            fail(key,
                 f"{spec!r}: an endpoint is openai:<model>@<base_url>, e.g. openai:qwen2.5-7b@http://127.0.0.1:8000/v1")
    elif m and m.group(1) == "scripted" and spec != _oracle_spec() and not Path(spec[len("scripted:"):]).is_file():
        fail(key, f"{spec!r}: no answers file {spec[len('scripted:'):]!r} (relative to {Path.cwd()}; "
                  "or scripted:oracle, the built-in persona)")
    elif m and m.group(1) == "offline" and not Path(spec).exists():
        if spec not in OFFLINE_SPECS:
            fail(key, f"unknown offline model {spec!r}{did_you_mean(spec, list(OFFLINE_SPECS))}; "
                      f"the offline models are: {', '.join(OFFLINE_SPECS)}")


def check_live_sweep(cell: "Cell", fail) -> None:
    """A sweep value that cannot change its cell is refused (a sweep point that changes nothing is a bug):
    e.g. an alpha with no preference block to scale, a summary knob under `flat_history`, a fact-call
    knob with calls off, any alpha in a context-only cell."""
    inert = cell.inert_params()
    for key in cell.point:
        root, rest = key.split(".", 1)
        if root in ("model", "embedder"):
            continue
        hit = next((k for k in inert if rest == k or rest.startswith(k + ".")), None)
        if hit is not None:
            fail(f"sweep.{key}", f"cannot change cell {cell.label}: {inert[hit]} (drop the key, or restrict the "
                                 f"strategy to datasets where it applies with `datasets:`)")


CARDS = Path(__file__).resolve().parents[4] / "datasets"  # the dataset cards: source, licence, how to obtain


def missing_data(cells: list["Cell"], data_dir=None, source: str = "<config>") -> list[str]:
    """One line per dataset of the cells whose files are not where the config says (a registered dataset in the
    data dir, or a `path:` file): its label, where it was looked for, and how to obtain it (the loader's own
    message, from its card). Empty when every dataset is there."""
    out: list[str] = []
    seen: set = set()
    for cell in cells:
        d = cell.dataset
        if (d.name, d.path) in seen:
            continue
        seen.add((d.name, d.path))
        try:
            if d.path is not None:
                resolve_path(d.path, data_dir)
            elif DATASETS.meta(d.name).get("sources") and not dataset_available(d.name, data_dir):
                load_dataset(d.name, data_dir=data_dir)  # the loader names what is missing and how to get it
        except DatasetNotFoundError as exc:
            card = CARDS / f"{d.name}.md"
            where = f" (its card: datasets/{card.name})" if d.path is None and card.is_file() else ""
            out.append(f"{source}: datasets ({d.key}): {exc}{where}")
    return out
