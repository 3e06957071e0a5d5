"""Experiment YAML: datasets x strategies x sweep points -> cells, each validated when the file is read
and identified by a hash of everything that decides its result.

```yaml
name: quickstart
seed: 0
model: {spec: offline:smollm2, max_context: 2048}
embedder: {model: auto}   # the stores' sentence encoder: auto = MiniLM for en, e5 for zh and mixed
defaults: {max_new_tokens: 32}            # params for every strategy that has them (nested blocks merge)
datasets: [{name: fixtures, question_limit: 8, split: full}]   # or {name: mine, path: mine.jsonl}
strategies: [{name: no_memory}, {name: recall_v4, label: v4, params: {recall: {...}}}]
sweep:                                     # grid over dotted keys
  params.preference_alpha: [0.2, 0.6]      # every strategy that has the parameter
  v4.recall.summary.per_message_threshold: [60, 200]   # one strategy (by label)
  model.max_context: [1024, 2048]
expect: {v4: {score: [0.0, 1.0]}}          # CI configs: metric ranges a run must land in (`v4@fixtures`: one dataset)
judge: {model: offline:smollm2}           # optional LLM judge -> judge_score (model and prompt logged)
```

Everything is checked at load time, before a model loads or a run starts: unknown keys anywhere
(also under `defaults:` and in sweep keys, which must fit at least one strategy), every cell's
strategy params, duplicate YAML keys. Errors are one line naming the file and the dotted key.

A cell's identity (`Cell.identity`, hashed into `config_hash`) is the validated, fully resolved
params (defaults from code included), the strategy's version and prompts, the dataset's spec,
version and scorer, the model and embedder (where the strategy uses them), the metrics' versions
and the judge: change any of them, or a default in code, and the cell runs again. The identity has two
parts: what generates the answers (`generation_hash`) and what scores them (`scoring_hash`: metrics,
detector, scorer, judge). When only the scoring part changed, `dkilab run` re-scores the stored answers
of the earlier run instead of generating them again (dkilab.eval.rescore).
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dkilab.config import ConfigError, merge_nested, read_yaml, refuse_bool_numbers, set_dotted, validate
from dkilab.registry import DATASETS, SCORERS, STRATEGIES, did_you_mean


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        return refuse_bool_numbers(cls, data)


class ModelSpec(_Strict):
    spec: str = "offline:smollm2"
    max_context: int | None = Field(2048, ge=256, le=10_000_000)
    dtype: Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"] = "auto"
    # cpu | auto (one GPU per process: data-parallel under accelerate) | shard (one model over every GPU,
    # one process) | cuda | cuda:N | mps
    device: str = Field("cpu", pattern=r"^(cpu|auto|shard|mps|cuda(:\d+)?)$")
    # false = context-only cells: every strategy builds exactly the prompt and K/V blocks it would give
    # the model, then stops (no forward pass; the tokenizer alone is loaded unless a strategy generates
    # while assembling): coverage, tokens and latency measured on full datasets on a CPU
    generate: bool = True
    # how it runs, not what it computes (batched = unbatched; kernels agree within fp tolerance): not
    # part of a cell's identity, so a finished cell is reused when only these change
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"  # flash: text cells only
    batch_size: int = Field(1, ge=1, le=512)  # questions decoded together (text strategies)
    concurrency: int = Field(4, ge=1, le=512)  # requests in flight to an OpenAI-compatible server
    max_retries: int = Field(4, ge=0, le=20)  # 429 / 5xx / connection retries, with backoff
    timeout: float = Field(120.0, gt=0)  # seconds per request try
    kv_cache_mb: int = Field(2048, ge=0)  # cached K/V blocks per cell (LRU by bytes), freed when the cell ends
    # reuse greedy responses from $DKILAB_CACHE_DIR/responses.sqlite (keyed by model, messages, tools,
    # K/V memories and settings), as inspect's --cache: a repeated run does not generate again
    cache: bool = False
    # a served model's tokenizer (hub id or local directory, loaded locally): token budgets and prompt
    # counts then use the served model's own tokens instead of the offline heuristic (1.24x on LoCoMo)
    tokenizer: str | None = None

    RUNTIME: ClassVar[set[str]] = {"attn_implementation", "batch_size", "concurrency", "max_retries", "timeout",
                                   "kv_cache_mb", "cache"}

    def identity(self) -> dict:
        """The fields that decide results (what a cell's hash and params record); an unset tokenizer is
        left out (the model's own is used), so configs without one keep their hashes."""
        out = self.model_dump(mode="json", exclude=self.RUNTIME)
        if out.get("tokenizer") is None:
            out.pop("tokenizer", None)
        weights = model_weights_digest(self.spec)
        if weights:  # weights trained again at the same path, or an edited script, make another cell
            out["weights"] = weights
        return out

    def load_kwargs(self) -> dict:
        """Everything `load_model(spec, **...)` takes from this block."""
        return self.model_dump(exclude={"spec", "generate", "kv_cache_mb", "cache"})


def model_weights_digest(spec: str) -> str | None:
    """What a model spec's path holds, as a digest: a local model directory's files, a .gguf file, a
    `scripted:` answers file, an endpoint's `/models` entry for the model (dkilab.models.openai_client.
    served_revision). None for hub ids, offline builds (their names fix their weights) and the oracle."""
    from dkilab.memory.embedder import weights_digest

    path = spec[len("scripted:"):] if spec.startswith("scripted:") else spec
    if spec.startswith("openai:"):
        from dkilab.models.openai_client import served_revision

        name, _, url = spec[len("openai:"):].partition("@")
        return served_revision(url, name) if url else None
    from dkilab.models.oracle import SPEC as ORACLE

    if spec.startswith("offline:") or spec == ORACLE:
        return None
    return weights_digest(path) if Path(path).exists() else None


class EmbedderSpec(_Strict):
    """The sentence encoder of the dataset stores (semantic search): `auto` (by the dataset's language:
    MiniLM for English, multilingual-e5-small for Chinese and mixed data, measured by
    experiments/embedders.yaml; for English, MiniLM with the LoCoMo-dev adapter, `offline:minilm-locomo`),
    `offline:minilm`, `offline:e5`, a local directory or a hub id.
    Stores record which encoder built them; each encoder gets its own cached store."""
    model: str = "auto"
    batch_size: int = Field(64, ge=1, le=4096)
    # what a stored turn's vector is computed from: the turn with the one it replies to (index text v2, ~2x
    # the tokens to encode) or the turn alone (v1); None = the encoder's default (memory.embedder.index_text_for:
    # the turn alone for MiniLM, with the previous turn for e5); each choice gets its own cached store
    with_previous_turn: bool | None = None
    # the encoder `auto` gives English data instead of offline:minilm-locomo (e.g. offline:minilm, the stock
    # ablation of `dkilab bench retrieval`); other languages keep theirs; None = the default
    english: str | None = None

    @model_validator(mode="after")
    def _english_with_auto(self) -> "EmbedderSpec":
        if self.english is not None and self.model != "auto":
            raise ValueError(f"embedder.english ({self.english!r}) picks the encoder `auto` gives English data; "
                             f"with model {self.model!r} it would be ignored: drop one of them")
        return self

    def for_language(self, language: str) -> "EmbedderSpec":
        if self.model != "auto":
            return self
        from dkilab.memory.embedder import auto_embedder  # English: MiniLM with the LoCoMo-dev adapter; else e5

        model = self.english if language == "en" and self.english else auto_embedder(language)
        return self.model_copy(update={"model": model, "english": None})

    @property
    def index_text(self) -> str:
        """The store's index-text version (dkilab.memory.store.index_text)."""
        if self.with_previous_turn is None:
            from dkilab.memory.embedder import index_text_for

            return index_text_for(self.model)
        return "2" if self.with_previous_turn else "1"

    def identity(self) -> dict:
        """What a cell's hash records: the index text it resolves to, as `with_previous_turn: false` for the
        turn alone and left out for the turn with its predecessor (the only choice before the knob existed,
        so those cells keep their hashes). A local model directory adds `weights`, the digest of its files: a
        cell of weights trained again at the same path is another cell."""
        from dkilab.memory.embedder import weights_digest

        out = self.model_dump(mode="json")
        out.pop("with_previous_turn", None)
        if out.get("english") is None:  # unset (and always once resolved): the hash of a cell before the knob
            out.pop("english", None)
        weights = weights_digest(self.model)
        if weights:
            out["weights"] = weights
        return out if self.index_text == "2" else out | {"with_previous_turn": False}


class DatasetSpec(_Strict):
    name: str
    label: str | None = Field(None, exclude=True)  # how cells and `expect` name it (default: name); not hashed
    path: str | None = None  # a file in the normalised format (then `name` is its label)
    limit: int | None = Field(None, ge=1)  # conversations (MADial: dialogues)
    # the first conversation kept, in loader order (before `limit`): a small held-back slice past the
    # conversations a component was fitted on (dkilab.eval.fitted), e.g. {name: locomo, first: 5, limit: 1}
    first: int = Field(0, ge=0, json_schema_extra={"off": 0})
    question_limit: int | None = Field(None, ge=1)  # questions per conversation
    # which questions a question_limit keeps: the first ones, or `stratified`: round-robin over the kinds of
    # question (answerable or not x category), so a small sample still holds every kind (`--limit` uses it)
    sample: Literal["first", "stratified"] = Field("first", json_schema_extra={"off": "first"})
    # full | ablation (evidence removed) | dev / test: the questions of the first / second half of the
    # conversations, in loader order (LoCoMo: 0-4 / 5-9); the store still holds every conversation, so
    # the halves share one cached store. Tune recall on dev, report on test (experiments/retrieval_*.yaml)
    split: Literal["full", "ablation", "dev", "test"] = "full"
    categories: list[Any] | None = None
    languages: list[Literal["en", "cn"]] | None = None  # keep the conversations in these languages
    # the data's language where its files do not say it (it picks the store's encoder, `embedder: auto`):
    # default what the dataset declares, or what a normalised file's records give
    language: Literal["en", "cn", "mixed"] | None = Field(None, json_schema_extra={"off": None})
    answerable_only: bool = False
    # keep the questions that carry a reference ("刚才", "recently", "你之前说的"), as the default reference
    # resolver reads them: the questions the recall scope can change (experiments/reference_scope.yaml)
    with_reference: bool = Field(False, json_schema_extra={"off": False})
    scorer: str | None = None  # override the dataset's declared scorer (locomo, f1, zh_f1, choice, auto)

    @field_validator("scorer")
    @classmethod
    def _scorer(cls, v):
        if v is not None and v not in SCORERS:
            raise ValueError(f"unknown scorer {v!r}{did_you_mean(v, SCORERS)}; known: {', '.join(SCORERS.names())}")
        return v

    @model_validator(mode="after")
    def _dataset(self):
        if self.path is None and self.name not in DATASETS:
            raise ValueError(f"unknown dataset {self.name!r}{did_you_mean(self.name, DATASETS)}; known: "
                             f"{', '.join(DATASETS.names())} (or give `path:` to a file in the normalised format)")
        return self

    @property
    def key(self) -> str:
        return self.label or self.name

    def conversations(self, data_dir=None) -> list:
        """The conversations this spec keeps, in loader order: `first`, then `limit` of them."""
        from dkilab.eval.datasets import load_dataset

        limit = self.limit and self.first + self.limit
        return load_dataset(self.name, data_dir=data_dir, limit=limit, path=self.path)[self.first:]

    @property
    def has_preferences(self) -> bool:
        """Whether the dataset declares user profiles (a preference block for K/V strategies)."""
        from dkilab.eval.datasets import dataset_info

        return bool(dataset_info(self.name, self.path).get("preferences"))

    def info(self) -> dict[str, Any]:
        """Version, language and scorer as declared, and `content`: the digest of the source files as they are
        now in $DKILAB_DATA_DIR (dkilab.eval.datasets.source_digest), so an edited file is a new cell."""
        from dkilab.eval.datasets import dataset_info, source_digest

        meta = dataset_info(self.name, self.path)
        return {"version": meta["version"], "language": self.language or meta["language"],
                "scorer": self.scorer or meta["scorer"],
                "content": source_digest(self.name, self.path)}


class JudgeSpec(_Strict):
    """Optional LLM judge (dkilab.eval.metrics.judge): a model spec as for `model.spec` (offline:smollm2,
    a hub id or directory, a .gguf, openai:<model>@<base_url>) and an optional prompt template.
    `abstention: true` also has it label every answer DECLINES/ANSWERS, which then decides abstention
    (hallucination_rate) instead of the structural rules (the rules decide where its reply is unclear)."""
    model: str = "offline:smollm2"
    prompt: str | None = None  # needs {question}, {gold}, {prediction}; default JUDGE_PROMPT
    abstention: bool = False
    abstention_prompt: str | None = None  # needs {question}, {prediction}; default ABSTENTION_PROMPT
    max_new_tokens: int = Field(6, ge=1, le=64)
    max_context: int | None = Field(2048, ge=256)
    # where and how the judge loads; unset = like the model under test (its dtype and device), so a GPU
    # run judges on the GPU in bf16, not on the CPU in fp32
    dtype: str | None = None
    device: str | None = Field(None, pattern=r"^(cpu|auto|shard|mps|cuda(:\d+)?)$")
    # judge prompts generated together before scoring (greedy: the same replies as one by one), so the
    # main process spends less time judging while the others wait; not part of a cell's identity
    batch_size: int = Field(8, ge=1, le=512)

    @model_validator(mode="after")
    def _placeholders(self):
        from dkilab.eval.metrics.judge import check_prompt

        if self.prompt is not None:
            check_prompt(self.prompt)
        if self.abstention_prompt is not None:
            check_prompt(self.abstention_prompt, ("{question}", "{prediction}"))
        return self

    def resolved(self) -> dict[str, Any]:
        from dkilab import prompts as text

        unset = {k for k in ("dtype", "device") if getattr(self, k) is None} | {"batch_size"}  # not identity
        return self.model_dump(exclude=unset) | {"prompt": self.prompt or text.JUDGE_PROMPT,
                                    "abstention_prompt": (self.abstention_prompt or text.ABSTENTION_PROMPT)
                                    if self.abstention else None}


class StrategySpec(_Strict):
    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    datasets: list[str] | None = None  # the dataset labels (or names) it runs on; default: all
    # keys of the experiment's `embedder:` this strategy runs with instead (e.g. {with_previous_turn: true}:
    # an ablation row on stores that embed each turn with the one it replies to); it gets its own stores
    embedder: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return self.label or self.name


class ExperimentConfig(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    seed: int = 0
    model: ModelSpec = Field(default_factory=ModelSpec)
    embedder: EmbedderSpec = Field(default_factory=EmbedderSpec)
    defaults: dict[str, Any] = Field(default_factory=dict)
    datasets: list[DatasetSpec] = Field(min_length=1)
    strategies: list[StrategySpec] = Field(min_length=1)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    expect: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    tracing: bool = True
    judge: JudgeSpec | None = None
    # which abstention detector scores hallucination when no judge labels it: `hybrid` (rules where sure, a
    # logistic regression over e5 vectors elsewhere) or `structural` (the rules alone); in the scoring hash
    abstention_detector: Literal["hybrid", "structural"] = "hybrid"
    # share of a cell's questions allowed to fail (an exception, an endpoint that stayed down) before the
    # cell counts as FAILED and runs again; a judgement on the result, not part of a cell's identity
    max_error_rate: float = Field(0.0, ge=0.0, le=1.0)
    # evaluate: no cell may run a fitted component on the split it was fitted on (dkilab.eval.fitted); tune:
    # a dev study of its own (split: dev allowed), whose figures are not held-back results
    purpose: Literal["evaluate", "tune"] = "evaluate"


SWEEP_ROOTS = ("params", "model", "embedder")


def check_config(cfg: ExperimentConfig, source: str = "<config>", budgets: bool = True) -> list["Cell"]:
    """Every check that needs the registries, then every cell's params and (with `budgets`) token budget
    (dkilab.eval.budgets): -> the cells, or ConfigError."""

    def fail(key: str, msg: str):
        raise ConfigError(f"{source}: {key}: {msg}")

    from dkilab.eval.runstate import CLAIM_PREFIX

    if cfg.name.startswith(CLAIM_PREFIX):
        fail("name", f"{cfg.name!r}: names starting with {CLAIM_PREFIX!r} are dkilab's cell claims (`dkilab run --claim`)")

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
            fail(f"sweep.{key}", f"no strategy of this experiment has a parameter {first!r}{did_you_mean(first, every)}")
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
    cells = expand_cells(cfg, source)
    for cell in cells:
        if not cfg.model.generate and cell.needs_model and not cell.instance.supports_context_only:
            fail(f"strategies ({cell.strategy.key})", f"strategy {cell.strategy.name!r} has no context-only mode "
                 "(model.generate: false): it generates inside its own flow; run it in a config that generates")
        check_live_sweep(cell, fail)
    from dkilab.eval.fitted import problems as on_fitted

    leaks = [line for cell in cells for line in on_fitted(cell, cfg.purpose)]
    if leaks:
        raise ConfigError("\n".join(f"{source}: split: {line}" for line in leaks))
    if budgets:
        from dkilab.eval.budgets import problems

        found = [line for cell in cells for line in problems(cell)]
        if found:
            raise ConfigError("\n".join(f"{source}: budget: {line}" for line in found))
    return cells


# what a cell logs besides the declared metrics (dkilab.eval.tracking.cell_metrics, the runner's counters)
CELL_LEVEL_METRICS = ("questions_per_minute", "query_embeddings", "resumed_questions", "response_cache_hits")


def check_metric_name(metric: str, key: str, fail) -> None:
    """`expect` names a metric a cell logs: a declared one (dkilab.eval.metrics), its interval bounds, or a
    cell-level count; anything else would only be found missing after the run."""
    from dkilab.eval.metrics import declared

    known = {m.name for m in declared()} | set(CELL_LEVEL_METRICS)
    base = metric.removesuffix("_ci95_low").removesuffix("_ci95_high")
    if base not in known:
        fail(key, f"unknown metric {metric!r}{did_you_mean(metric, sorted(known))}"
                  "; the metrics: docs/experiments.md")


def check_embedder(spec: "EmbedderSpec", key: str, fail) -> None:
    """An encoder is `auto`, one of the offline builds, a local directory or a hub id: an `offline:` name that
    is none of the builds, or another `scheme:`, would fail only when the first store is built."""
    from dkilab.memory.embedder import OFFLINE_EMBEDDERS

    for name, value in (("model", spec.model), ("english", spec.english)):
        if value is None or value == "auto" or value in OFFLINE_EMBEDDERS or Path(value).exists():
            continue
        if value.startswith("offline:") or re.match(r"[A-Za-z][\w+.-]*:(?!//)", value):
            fail(f"{key}.{name}" if name == "english" or key == "embedder" else key,
                 f"unknown encoder {value!r}{did_you_mean(value, OFFLINE_EMBEDDERS)}; known: auto, "
                 f"{', '.join(OFFLINE_EMBEDDERS)}, a local directory or a hub id")


def _oracle_spec() -> str:
    from dkilab.models.oracle import SPEC

    return SPEC


def check_model_spec(spec, key: str, fail) -> None:
    """`scheme:rest` must name a registered loader (`nosuch:model` would otherwise be tried as a hub id
    in every cell); specs without a scheme (hub ids, directories, .gguf files) are checked when loaded."""
    from dkilab.registry import MODELS

    if not isinstance(spec, str) or not spec.strip():
        fail(key, f"a model spec is a non-empty string, got {spec!r}")
    m = re.match(r"([A-Za-z][\w+.-]*):(?!//)", spec)
    if m and not Path(spec).exists() and m.group(1) not in MODELS:
        fail(key, f"unknown model loader {m.group(1)!r} in {spec!r}{did_you_mean(m.group(1), MODELS.names())}; "
                  f"registered: {', '.join(MODELS.names())} (or a hub id, a directory, a .gguf file)")
    elif m and m.group(1) == "openai":
        name, _, url = spec[len("openai:"):].partition("@")
        if not name or not url:
            fail(key, f"{spec!r}: an endpoint is openai:<model>@<base_url>, e.g. openai:qwen2.5-7b@http://127.0.0.1:8000/v1")
    elif m and m.group(1) == "scripted" and spec != _oracle_spec() and not Path(spec[len("scripted:"):]).is_file():
        fail(key, f"{spec!r}: no answers file {spec[len('scripted:'):]!r} (relative to {Path.cwd()}; "
                  "or scripted:oracle, the built-in persona)")
    elif m and m.group(1) == "offline" and not Path(spec).exists():
        from dkilab.models.loading import OFFLINE_SPECS  # a dict: importing it loads no model and no torch

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

    @cached_property
    def instance(self):
        """A fresh strategy object for this cell (never shared between cells)."""
        inst = STRATEGIES[self.strategy.name](self.params)
        # a strategy that needs no model (a ranking) is the same cell in a context-only config
        inst.context_only = not self.model.generate and inst.requires_model()
        return inst

    def inert_params(self) -> dict[str, str]:
        """The strategy params this cell cannot be changed by, with the reason (see Strategy.inert_params)."""
        prefs = self.dataset.has_preferences or bool(getattr(self.params, "preferences", None))
        return self.instance.inert_params(has_preferences=prefs, generate=self.model.generate)

    @property
    def needs_model(self) -> bool:
        return self.instance.requires_model()

    @property
    def resolved(self) -> dict[str, Any]:
        """What the cell runs, every default filled in (logged as params and resolved_config.yaml)."""
        from dkilab.eval.metrics import detector_card, metrics_version

        detector = dict(detector_card(self.detector))
        if self.judge is not None and self.judge.abstention:
            from dkilab.eval.metrics.abstention import judge_card

            detector = judge_card(self.judge.model, self.judge.resolved()["abstention_prompt"]) | {
                "fallback": f"{detector['name']}-v{detector['version']}"}
        cards = self.instance.cards()
        out = {"strategy": {"name": self.strategy.name, "label": self.strategy.key, "version": self.instance.version,
                            "params": self.params.model_dump(mode="json")} | ({"cards": cards} if cards else {}),
               "dataset": identity_params(self.dataset) | self.dataset.info(),
               "embedder": self.embedder.identity(), "seed": self.seed,
               "metrics": {"version": metrics_version(), "abstention_detector": detector}}
        if self.needs_model:
            out["model"] = self.model.identity()
        if self.judge is not None:
            out["judge"] = self.judge.resolved()
        return out

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
        from dkilab.eval.datasets import dataset_info

        if not dataset_info(self.dataset.name, self.dataset.path).get("choices"):
            return {}
        from dkilab.prompts import CHOOSE

        return {f"choose.{lang}": text for lang, text in CHOOSE.items()}

    @cached_property
    def config_hash(self) -> str:
        return _digest(self.identity)

    @cached_property
    def generation_identity(self) -> dict[str, Any]:
        """The part of the identity that decides the answers: the identity without what only scores them
        (the metrics and their versions, the abstention detector, the dataset's scorer, the judge). Two
        cells with the same generation hash have the same answers, so a cell whose scoring part alone
        changed is re-scored from its stored answers instead of generated again (dkilab.eval.rescore)."""
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
    off: a field declared `json_schema_extra={"off": v}` at `v`, and the fields declared `{"off_with": f}`
    while their sibling `f` is off. A lever added later, off by default, so changes no existing cell's
    hash (every cell would otherwise run again); switched on, all of its fields are in the identity."""
    from pydantic import BaseModel

    def walk(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
        extra = {n: f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
                 for n, f in type(model).model_fields.items()}
        off = {n for n, e in extra.items() if "off" in e and getattr(model, n) == e["off"]}
        return {n: walk(getattr(model, n), v) if isinstance(getattr(model, n), BaseModel) else v
                for n, v in dumped.items() if n not in off and extra.get(n, {}).get("off_with") not in off}

    return walk(params, params.model_dump(mode="json"))


def _has_param(strategy_name: str, dotted: str) -> bool:
    return dotted.split(".")[0] in STRATEGIES[strategy_name].Params.model_fields


def expand_cells(cfg: ExperimentConfig, source: str = "<config>") -> list[Cell]:
    """strategies x sweep grid x datasets, each cell's params validated, deduplicated by config hash
    (a `params.` key a strategy lacks is not applied to it)."""
    keys = list(cfg.sweep)
    grid = [dict(zip(keys, values)) for values in itertools.product(*(cfg.sweep[k] for k in keys))] or [{}]
    cells, seen = [], set()
    for ds in cfg.datasets:
        for i, s in enumerate(cfg.strategies):
            if s.datasets is not None and ds.key not in s.datasets:
                continue
            for point in grid:
                params = merge_nested({k: v for k, v in cfg.defaults.items() if _has_param(s.name, k)}, s.params)
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
                validated = validate(STRATEGIES[s.name].Params, params, source, f"params of {where}", "params")
                cell = Cell(StrategySpec(name=s.name, label=s.label, params=params, datasets=s.datasets,
                                         embedder=s.embedder), ds,
                            validate(ModelSpec, model, source, f"model of {where}", "model"),
                            validate(EmbedderSpec, embedder, source, f"embedder of {where}", "embedder"
                                     ).for_language(ds.info()["language"]),
                            applied, cfg.seed, cfg.judge, validated, cfg.abstention_detector)
                try:
                    cell.instance  # components built from the params (e.g. a reference resolver YAML)
                except (ValueError, OSError) as exc:
                    raise ConfigError(f"{source}: {where}: {exc}") from None
                if cell.config_hash not in seen:
                    seen.add(cell.config_hash)
                    cells.append(cell)
    return cells


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` (value parsed as YAML: numbers, lists, booleans)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key.strip()}: value {value!r} is not valid YAML") from None
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


def load_experiment(path: str | Path, overrides: dict[str, Any] | None = None, budgets: bool = True) -> ExperimentConfig:
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
