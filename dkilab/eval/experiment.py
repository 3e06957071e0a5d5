"""Experiment YAML: datasets x strategies x sweep points -> cells, each with a stable config hash.

```yaml
name: quickstart
seed: 0
model: {spec: offline:smollm2, max_context: 2048}
defaults: {max_new_tokens: 32}          # params given to every strategy that has them (nested blocks merge)
datasets: [{name: fixtures, question_limit: 8, split: full}]
strategies: [{name: no_memory}, {name: recall_v4, label: v4, params: {recall: {...}}}]
sweep:                                   # grid over dotted keys
  params.preference_alpha: [0.2, 0.6]    # every strategy that has the parameter
  v4.recall.summary.per_message_threshold: [60, 200]   # one strategy (by label)
  model.max_context: [1024, 2048]
expect: {v4: {score: [0.0, 1.0]}}        # CI configs: metric ranges a run must land in
judge: {model: offline:smollm2}         # optional LLM judge -> judge_score (model and prompt logged)
```
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dkilab.config import read_yaml, validate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    spec: str = "offline:smollm2"
    max_context: int | None = Field(2048, ge=256)
    dtype: str = "auto"
    device: str = "cpu"


class DatasetSpec(_Strict):
    name: str
    limit: int | None = Field(None, ge=1)  # conversations
    question_limit: int | None = Field(None, ge=1)  # questions per conversation
    split: Literal["full", "ablation"] = "full"
    categories: list[Any] | None = None
    answerable_only: bool = False


class JudgeSpec(_Strict):
    """Optional LLM judge (dkilab.eval.metrics.judge): a model spec as for `model.spec` (offline:smollm2,
    a hub id or directory, a .gguf, openai:<model>@<base_url>) and an optional prompt template."""
    model: str = "offline:smollm2"
    prompt: str | None = None  # needs {question}, {gold}, {prediction}; default JUDGE_PROMPT
    max_new_tokens: int = Field(6, ge=1, le=64)
    max_context: int | None = Field(2048, ge=256)

    @model_validator(mode="after")
    def _placeholders(self):
        from dkilab.eval.metrics.judge import check_prompt

        if self.prompt is not None:
            check_prompt(self.prompt)
        return self


class StrategySpec(_Strict):
    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.label or self.name


class ExperimentConfig(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    model: ModelSpec = Field(default_factory=ModelSpec)
    defaults: dict[str, Any] = Field(default_factory=dict)
    datasets: list[DatasetSpec] = Field(min_length=1)
    strategies: list[StrategySpec] = Field(min_length=1)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    expect: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    tracing: bool = True
    judge: JudgeSpec | None = None

    @model_validator(mode="after")
    def _check(self):
        from dkilab.eval.datasets import LOADERS
        from dkilab.strategies import STRATEGIES

        for i, d in enumerate(self.datasets):
            if d.name not in LOADERS:
                raise ValueError(f"datasets.{i}.name: unknown dataset {d.name!r}; known: {', '.join(sorted(LOADERS))}")
        keys = [s.key for s in self.strategies]
        for i, s in enumerate(self.strategies):
            if s.name not in STRATEGIES:
                raise ValueError(f"strategies.{i}.name: unknown strategy {s.name!r}; registered: {', '.join(sorted(STRATEGIES))}")
        if len(set(keys)) != len(keys):
            raise ValueError(f"strategies: labels must be unique, got {keys} (give repeated strategies a label)")
        for key, values in self.sweep.items():
            root = key.split(".")[0]
            if root not in ("params", "model", *keys) or "." not in key:
                raise ValueError(f"sweep.{key}: a sweep key starts with params., model. or a strategy label ({', '.join(keys)})")
            if not values:
                raise ValueError(f"sweep.{key}: needs at least one value")
        for label in self.expect:
            if label not in keys:
                raise ValueError(f"expect.{label}: no strategy with that label")
        return self


@dataclass
class Cell:
    strategy: StrategySpec
    dataset: DatasetSpec
    model: ModelSpec
    point: dict[str, Any]  # the sweep values that apply to this cell
    seed: int
    judge: JudgeSpec | None = None

    @property
    def resolved(self) -> dict[str, Any]:
        out = {"strategy": {"name": self.strategy.name, "label": self.strategy.key, "params": self.strategy.params},
               "dataset": self.dataset.model_dump(), "model": self.model.model_dump(), "seed": self.seed}
        if self.judge is not None:
            from dkilab.eval.metrics.judge import JUDGE_PROMPT

            out["judge"] = self.judge.model_dump() | {"prompt": self.judge.prompt or JUDGE_PROMPT}
        return out

    @property
    def config_hash(self) -> str:
        from dkilab import __version__

        blob = json.dumps([__version__, self.resolved], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        sweep = ",".join(f"{k.split('.', 1)[1]}={v}" for k, v in self.point.items())
        split = ":ablation" if self.dataset.split == "ablation" else ""
        return f"{self.strategy.key}@{self.dataset.name}{split}" + (f"[{sweep}]" if sweep else "")


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"{dotted}: {p} is not a mapping")
    node[leaf] = value


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, nested mappings merged key by key (a strategy's `recall.signals.x`
    changes that one key of a `recall:` block given in `defaults`)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _has_param(strategy_name: str, dotted: str) -> bool:
    from dkilab.strategies import STRATEGIES

    return dotted.split(".")[0] in STRATEGIES[strategy_name].Params.model_fields


def expand_cells(cfg: ExperimentConfig) -> list[Cell]:
    """strategies x sweep grid x datasets, deduplicated by config hash (a key a strategy lacks is ignored)."""
    keys = list(cfg.sweep)
    grid = [dict(zip(keys, values)) for values in itertools.product(*(cfg.sweep[k] for k in keys))] or [{}]
    cells, seen = [], set()
    for ds in cfg.datasets:
        for s in cfg.strategies:
            for point in grid:
                params = _merge({k: v for k, v in cfg.defaults.items() if _has_param(s.name, k)}, s.params)
                model = cfg.model.model_dump()
                applied = {}
                for key, value in point.items():
                    root, rest = key.split(".", 1)
                    if root == "model":
                        _set_dotted(model, rest, value)
                    elif root == "params" and _has_param(s.name, rest):
                        _set_dotted(params, rest, value)
                    elif root == s.key:
                        _set_dotted(params, rest, value)
                    else:
                        continue
                    applied[key] = value
                cell = Cell(StrategySpec(name=s.name, label=s.label, params=params), ds,
                            validate(ModelSpec, model, "sweep", "model"), applied, cfg.seed, cfg.judge)
                if cell.config_hash not in seen:
                    seen.add(cell.config_hash)
                    cells.append(cell)
    return cells


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` (value parsed as YAML: numbers, lists, booleans)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def load_experiment(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read and validate an experiment YAML; `overrides` are dotted keys set first (e.g. from --set)."""
    data = read_yaml(path)
    for key, value in (overrides or {}).items():
        parts = key.split(".")
        if parts[0] in ("datasets", "strategies") and len(parts) > 1 and parts[1].isdigit():
            node = data[parts[0]][int(parts[1])]
            _set_dotted(node, ".".join(parts[2:]), value)
        else:
            _set_dotted(data, key, value)
    return validate(ExperimentConfig, data, str(path), "experiment config")
