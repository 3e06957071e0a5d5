"""Reading an experiment: YAML or a dict, --set overrides, the header comment, a question limit."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from dkilab.config import ConfigError, parse_yaml, read_yaml, set_dotted, validate
from dkilab.eval.harness.experiment.checks import check_config
from dkilab.eval.harness.experiment.schema import ExperimentConfig


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` (value parsed as YAML: numbers, lists, booleans)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_yaml(value, f"--set {key.strip()}: value {value!r}")
    return out


def apply_overrides(data: dict, overrides: dict[str, Any], source: str = "--set") -> dict:
    """Set dotted keys in a config mapping; `strategies.2.params.x` and `datasets.0.limit` index the lists."""
    data = copy.deepcopy(data)
    for key, value in overrides.items():
        parts = key.split(".")
        if parts[0] in ("datasets", "strategies") and len(parts) > 1:
            items = data.get(parts[0]) or []
            if not parts[1].isdigit() or int(parts[1]) >= len(items):
                raise ConfigError(f"{source} {key}: the config has {len(items)} {parts[0]} "
                                  f"(indexes 0-{len(items) - 1}); write {parts[0]}.<index>.<key>")
            if len(parts) == 2:
                raise ConfigError(f"{source} {key}: give a key inside the entry, e.g. {key}.params.<param>")
            set_dotted(items[int(parts[1])], ".".join(parts[2:]), value, where=f"{source} {key}")
        else:
            set_dotted(data, key, value, where=f"{source} {key}")
    return data


def load_experiment(path: str | Path, overrides: dict[str, Any] | None = None,
                    budgets: bool = True) -> ExperimentConfig:
    """Read and check an experiment YAML (`overrides` = dotted keys set first, e.g. from --set): every
    cell's params are validated here, so a typo fails now with the file and key, not after a model loads."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an experiment config is a mapping (name, datasets, strategies, ...)")
    cfg = experiment_from_dict(apply_overrides(data, overrides or {}), str(path), budgets)
    if not cfg.description:  # the comment block a config starts with says what it is for: MLflow shows it
        cfg = cfg.model_copy(update={"description": header_comment(path)})
    return cfg


def experiment_from_dict(data: dict, source: str = "<config>", budgets: bool = True) -> ExperimentConfig:
    """Validate and check an experiment mapping (what `load_experiment` does after reading the file)."""
    cfg = validate(ExperimentConfig, data, source, "experiment config")
    check_config(cfg, source, budgets)
    return cfg


def header_comment(path: str | Path) -> str:
    """The `#` comment lines a YAML file starts with, as text (empty if none)."""
    lines = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return "\n".join(lines).strip()


def with_question_limit(cfg: ExperimentConfig, limit: int) -> ExperimentConfig:
    """`--limit N`: N questions per conversation in every dataset, drawn stratified (every kind of question
    keeps a place while N allows), in an experiment of its own (`<name>-limitN`), so smoke runs never mix
    with the full runs in a report or a notebook."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(f"--questions-per-conversation (--limit): must be a positive number, got {limit!r}")
    return cfg.model_copy(update={"name": f"{cfg.name}-limit{limit}",
                                  "datasets": [d.model_copy(update={"question_limit": limit, "sample": "stratified"})
                                               for d in cfg.datasets]})
