"""A cell and its identity: the resolved params, versions and specs hashed into its generation and scoring
hashes, and the expansion of a config into cells."""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from dkilab.config import ConfigError, merge_nested, set_dotted, validate
from dkilab.encoders.passages import VERSION as PASSAGES_VERSION
from dkilab.eval.data import dataset_info
from dkilab.eval.data.lengths import over_window
from dkilab.eval.harness.experiment.schema import (
    DatasetSpec,
    EmbedderSpec,
    ExperimentConfig,
    JudgeSpec,
    ModelSpec,
    StrategySpec,
    model_weights_digest,
)
from dkilab.eval.scoring import detector_card, metrics_version
from dkilab.eval.scoring.abstention import judge_card
from dkilab.eval.scoring.scorers import EXTRA_SCORERS
from dkilab.models import response_cache as responses
from dkilab.prompts import CHOOSE
from dkilab.strategies import STRATEGIES


@dataclass
class Cell:
    strategy: StrategySpec  # params: the merged YAML params (what the file said)
    dataset: DatasetSpec
    model: ModelSpec
    embedder: EmbedderSpec
    point: dict[str, Any]  # the sweep values that apply to this cell
    seed: int
    judge: JudgeSpec | None = None
    params: Any = field(default=None, repr=False)  # the validated Params (every default filled in)
    detector: str = "hybrid"  # the abstention detector (ExperimentConfig.abstention_detector)
    scorers: tuple[str, ...] = ()  # scorers the experiment adds by name (ExperimentConfig.scorers)

    @cached_property
    def instance(self):
        """A fresh strategy object for this cell (never shared between cells), built with the K/V budget and the
        response cache its model spec asks for (`kv_cache_mb`, `cache`: keyed by the weights' digest)."""
        spec = self.model
        opens = (lambda: responses.shared(model_weights_digest(spec.spec))) if spec.cache else None
        inst = STRATEGIES[self.strategy.name](self.params, kv_cache_bytes=spec.kv_cache_mb * 1024**2,
                                              response_cache=opens)
        # a strategy that needs no model (a ranking) is the same cell in a context-only config
        inst.context_only = not self.model.generate and inst.needs().model
        return inst

    def inert_params(self) -> dict[str, str]:
        """The strategy params this cell cannot be changed by, with the reason (see Strategy.inert_params)."""
        prefs = self.dataset.has_preferences or bool(getattr(self.params, "preferences", None))
        return self.instance.inert_params(has_preferences=prefs, generate=self.model.generate)

    @property
    def needs_model(self) -> bool:
        return self.instance.needs().model

    @property
    def resolved(self) -> dict[str, Any]:
        """What the cell runs, every default filled in (logged as params and resolved_config.yaml)."""
        detector = dict(detector_card(self.detector))
        if self.judge is not None and self.judge.abstention:
            detector = judge_card(self.judge.model, self.judge.resolved()["abstention_prompt"]) | {
                "fallback": f"{detector['name']}-v{detector['version']}"}
        cards = self.instance.cards()
        out = {"strategy": {"name": self.strategy.name, "label": self.strategy.key, "version": self.instance.version,
                            "params": self.params.model_dump(mode="json")} | ({"cards": cards} if cards else {}),
               "dataset": identity_params(self.dataset) | self.dataset.info(),
               "embedder": self.embedder.identity() | self._passages, "seed": self.seed,
               "metrics": {"version": metrics_version(), "abstention_detector": detector} | self._scorers}
        if self.needs_model:
            out["model"] = self.model.identity()
        if self.judge is not None:
            out["judge"] = self.judge.resolved()
        return out

    @property
    def _scorers(self) -> dict[str, Any]:
        """The added scorers with their versions, in the scoring part of the identity; nothing where none is (the
        hash as before)."""
        return {"scorers": {n: EXTRA_SCORERS.meta(n)["version"] for n in self.scorers}} if self.scorers else {}

    @cached_property
    def _passages(self) -> dict[str, str]:
        """`passages: <version>` where the dataset has messages over the encoder's window, which its store indexes as
        passages (dkilab/eval/data/lengths.py); nothing where every message fits (the hash as before)."""
        if not self.embedder.passages:  # recorded by the embedder's identity
            return {}
        d = self.dataset
        try:
            key = (d.name, d.path, d.first, d.limit, d.granularity, d.info().get("content"))
            n = over_window(key, d.conversations, self.embedder.model)
        except Exception:  # absent data: the cell is refused by its own check, and can run nothing
            return {}
        return {"passages": PASSAGES_VERSION} if n else {}

    @cached_property
    def identity(self) -> dict[str, Any]:
        """Everything that decides the cell's result: the resolved config plus the strategy's identity
        (version, prompts, components configured in code such as the reference resolver's mappings)."""
        model_name = self.model.spec if self.needs_model else ""
        out = self.resolved | {"strategy_identity": self.instance.identity(model_name)}
        out["strategy"] = out["strategy"] | {"params": identity_params(self.params)}
        if self.harness_prompts():
            out["harness_prompts"] = self.harness_prompts()
        return out

    def harness_prompts(self) -> dict[str, str]:
        """Prompt text the harness adds to a question (not the strategy): how to answer a multiple-choice
        question, on datasets that may have them (declared `choices`, or a file in the normalised format)."""
        if not dataset_info(self.dataset.name, self.dataset.path).get("choices"):
            return {}

        return {f"choose.{lang}": text for lang, text in CHOOSE.items()}

    @cached_property
    def config_hash(self) -> str:
        return _digest(self.identity)

    @cached_property
    def generation_identity(self) -> dict[str, Any]:
        """The part of the identity that decides the answers: the identity without what only scores them
        (the metrics and their versions, the abstention detector, the dataset's scorer, the judge). Two
        cells with the same generation hash have the same answers, so a cell whose scoring part alone
        changed is re-scored from its stored answers instead of generated again (dkilab.eval.harness.rescore)."""
        out = copy.deepcopy(self.identity)
        out.pop("metrics", None)
        out.pop("judge", None)
        out["dataset"].pop("scorer", None)
        return out

    @cached_property
    def generation_hash(self) -> str:
        return _digest(self.generation_identity)

    @cached_property
    def scoring_identity(self) -> dict[str, Any]:
        """What scores the answers: metrics and their versions, the detector, the scorer, the judge."""
        out = {"metrics": self.identity["metrics"], "scorer": self.identity["dataset"].get("scorer")}
        return out | ({"judge": self.identity["judge"]} if "judge" in self.identity else {})

    @cached_property
    def scoring_hash(self) -> str:
        return _digest(self.scoring_identity)

    def prompts(self) -> dict[str, str]:
        out = self.instance.prompts(self.model.spec if self.needs_model else "") | {
            f"harness.{k}": v for k, v in self.harness_prompts().items()}
        if self.judge is not None:
            out |= {f"judge.{k}": v for k, v in self.judge.resolved().items() if k.endswith("prompt") and v}
        return out

    @property
    def label(self) -> str:
        sweep = ",".join(f"{k.split('.', 1)[1]}={v}" for k, v in self.point.items())
        split = f":{self.dataset.split}" if self.dataset.split != "full" else ""
        return f"{self.strategy.key}@{self.dataset.key}{split}" + (f"[{sweep}]" if sweep else "")


def _digest(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def identity_params(params) -> dict[str, Any]:
    """A params model as it enters a cell's identity: its JSON dump without the fields of a lever that is
    off: a field declared `knob(..., off=v)` at `v`, and the fields declared `knob_setting(f, ...)` while
    their lever `f` is off (dkilab/config.py). A lever added later, off by default, so changes no existing cell's
    hash (every cell would otherwise run again); switched on, all of its fields are in the identity."""
    def walk(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
        extra = {n: f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
                 for n, f in type(model).model_fields.items()}
        off = {n for n, e in extra.items() if "off" in e and getattr(model, n) == e["off"]}
        return {n: walk(getattr(model, n), v) if isinstance(getattr(model, n), BaseModel) else v
                for n, v in dumped.items() if n not in off and extra.get(n, {}).get("off_with") not in off}

    return walk(params, params.model_dump(mode="json"))


def _has_param(strategy_name: str, dotted: str) -> bool:
    return dotted.split(".")[0] in STRATEGIES[strategy_name].Params.model_fields


def _check_default(params: type[BaseModel], key: str, value: Any, source: str) -> None:
    """ConfigError naming `defaults.<key>` when that value is wrong for the strategy's params (other fields, e.g.
    a required one the strategy gets from its own params, are not this key's error)."""
    try:
        params.model_validate({key: value})
    except ValidationError as exc:
        mine = [e for e in exc.errors() if e["loc"] and e["loc"][0] == key]
        if mine:
            where = ".".join(str(p) for p in mine[0]["loc"])
            raise ConfigError(f"{source}: invalid defaults: defaults.{where}: {mine[0]['msg']}") from None


def expand_cells(cfg: ExperimentConfig, source: str = "<config>") -> list[Cell]:
    """strategies x sweep grid x datasets, each cell's params validated, deduplicated by config hash
    (a `params.` key a strategy lacks is not applied to it)."""
    keys = list(cfg.sweep)
    grid = [dict(zip(keys, values)) for values in itertools.product(*(cfg.sweep[k] for k in keys))] or [{}]
    for s in cfg.strategies:  # a bad value under `defaults:` is named there, not at the strategy it reached first
        for k, v in cfg.defaults.items():
            if _has_param(s.name, k) and k not in s.params:
                _check_default(STRATEGIES[s.name].Params, k, v, source)
    cells, seen = [], set()
    for ds in cfg.datasets:
        for i, s in enumerate(cfg.strategies):
            if s.datasets is not None and ds.key not in s.datasets:
                continue
            for point in grid:
                Params = STRATEGIES[s.name].Params
                defaults = {k: v for k, v in cfg.defaults.items() if _has_param(s.name, k)}
                params = merge_nested(Params.applicable_defaults(s.params, defaults), s.params)
                model, embedder = cfg.model.model_dump(), merge_nested(cfg.embedder.model_dump(), s.embedder or {})
                applied = {}
                for key, value in point.items():
                    root, rest = key.split(".", 1)
                    if root in ("model", "embedder"):
                        set_dotted(model if root == "model" else embedder, rest, value, where=f"{source}: sweep.{key}")
                    elif (root == "params" and _has_param(s.name, rest)) or root == s.key:
                        set_dotted(params, rest, value, where=f"{source}: sweep.{key}")
                    else:
                        continue
                    applied[key] = value
                where = f"strategies.{i} ({s.key})" + (f" at sweep point {applied}" if applied else "")
                validated = validate(Params, params, source, f"params of {where}", "params")
                cell = Cell(StrategySpec(name=s.name, label=s.label, params=params, datasets=s.datasets,
                                         embedder=s.embedder), ds,
                            validate(ModelSpec, model, source, f"model of {where}", "model"),
                            validate(EmbedderSpec, embedder, source, f"embedder of {where}", "embedder"
                                     ).for_language(ds.info()["language"]),
                            applied, cfg.seed, cfg.judge, validated, cfg.abstention_detector, tuple(cfg.scorers))
                try:
                    cell.instance  # components built from the params (e.g. a reference resolver YAML)
                except (ValueError, OSError) as exc:
                    raise ConfigError(f"{source}: {where}: {exc}") from None
                if cell.config_hash not in seen:
                    seen.add(cell.config_hash)
                    cells.append(cell)
    return cells
