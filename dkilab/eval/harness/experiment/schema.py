"""The experiment YAML's schema: the model, embedder, dataset, judge and strategy blocks, and the config."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dkilab import prompts as text
from dkilab.config import knob, refuse_bool_numbers, under_data_dir
from dkilab.encoders.embedder import auto_embedder, index_text_for, weights_digest
from dkilab.eval.data import DATASETS, by_session, dataset_info, load_dataset, source_digest
from dkilab.eval.data.locomo_audit import audit_info
from dkilab.eval.scoring import SCORERS
from dkilab.eval.scoring.evermemos_judge import EverMemOSJudge, load_prompts
from dkilab.eval.scoring.judge import check_prompt
from dkilab.eval.scoring.locomo_j import LocomoJ, load_template
from dkilab.eval.scoring.longmemeval_check import LongMemEval, digest, load_templates, readable
from dkilab.models.backends.openai_client import served_revision
from dkilab.models.oracle import SPEC as ORACLE
from dkilab.models.oracle import VERSION as ORACLE_VERSION
from dkilab.registry import did_you_mean


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
    `scripted:` answers file, an endpoint's `/models` entry for the model (dkilab.models.backends.openai_client.
    served_revision), the oracle's version. None for hub ids and offline builds (their names fix their weights)."""
    path = spec[len("scripted:"):] if spec.startswith("scripted:") else spec
    if spec.startswith("openai:"):
        name, _, url = spec[len("openai:"):].partition("@")
        return served_revision(url, name) if url else None

    if spec == ORACLE:
        return f"oracle-{ORACLE_VERSION}"
    if spec.startswith("offline:"):
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
    # the tokens to encode) or the turn alone (v1); None = the default (encoders.embedder.index_text_for: with
    # the previous turn); each choice gets its own cached store
    with_previous_turn: bool | None = None
    # the encoder `auto` gives English data instead of offline:minilm-locomo (e.g. offline:minilm, the stock
    # ablation of `dkilab bench retrieval`); other languages keep theirs; None = the default
    english: str | None = None
    # a message over the encoder's window is indexed as passages that fit it (encoders/passages.py); false: cut
    # at the window, as stores were before (the ablation); each choice gets its own cached store
    passages: bool = True

    @model_validator(mode="after")
    def _english_with_auto(self) -> "EmbedderSpec":
        if self.english is not None and self.model != "auto":
            raise ValueError(f"embedder.english ({self.english!r}) picks the encoder `auto` gives English data; "
                             f"with model {self.model!r} it would be ignored: drop one of them")
        return self

    def for_language(self, language: str) -> "EmbedderSpec":
        if self.model != "auto":
            return self

        model = self.english if language == "en" and self.english else auto_embedder(language)
        return self.model_copy(update={"model": model, "english": None})

    @property
    def index_text(self) -> str:
        """The store's index-text version (dkilab.memory.store.index_text)."""
        if self.with_previous_turn is None:
            return index_text_for(self.model)
        return "2" if self.with_previous_turn else "1"

    def identity(self) -> dict:
        """What a cell's hash records: the index text it resolves to, as `with_previous_turn: false` for the
        turn alone and left out for the turn with its predecessor (the only choice before the knob existed,
        so those cells keep their hashes). A local model directory adds `weights`, the digest of its files: a
        cell of weights trained again at the same path is another cell."""
        out = self.model_dump(mode="json")
        out.pop("with_previous_turn", None)
        if out.get("passages", True):  # on: recorded by the cell where the data has long messages (Cell._passages)
            out.pop("passages", None)
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
    # conversations a component was fitted on (dkilab.eval.harness.fitted), e.g. {name: locomo, first: 5, limit: 1}
    first: int = knob(0, ge=0, off=0)
    question_limit: int | None = Field(None, ge=1)  # questions per conversation
    # which questions a question_limit keeps: the first ones, or `stratified`: round-robin over the kinds of
    # question (answerable or not x category), so a small sample still holds every kind (`--limit` uses it)
    sample: Literal["first", "stratified"] = knob("first", off="first")
    # full | ablation (evidence removed) | dev / test: the questions of the first / second half of the
    # conversations, in loader order (LoCoMo: 0-4 / 5-9); the store still holds every conversation, so
    # the halves share one cached store. Tune recall on dev, report on test (experiments/retrieval_*.yaml)
    split: Literal["full", "ablation", "dev", "test"] = "full"
    categories: list[Any] | None = None
    languages: list[Literal["en", "cn"]] | None = None  # keep the conversations in these languages
    # the data's language where its files do not say it (it picks the store's encoder, `embedder: auto`):
    # default what the dataset declares, or what a normalised file's records give
    language: Literal["en", "cn", "mixed"] | None = knob(None, off=None)
    answerable_only: bool = False
    # keep the questions that carry a reference ("刚才", "recently", "你之前说的"), as the default reference
    # resolver reads them: the questions the recall scope can change (experiments/reference_scope.yaml)
    with_reference: bool = knob(False, off=False)
    scorer: str | None = None  # override the dataset's declared scorer (locomo, f1, zh_f1, choice, auto)
    # LoCoMo: leave out the questions whose gold the public audit finds wrong (its `audit` folder; absolute or
    # under the data dir); the identity records how many and the ceiling they left (eval/data/locomo_audit.py)
    exclude_audited: str | None = knob(None, off=None)
    # session: each session one memory item, its turns joined, the evidence mapped to its sessions (long items
    # from short-turn data; dkilab/eval/data/sessions.py)
    granularity: Literal["message", "session"] = knob("message", off="message")

    @field_validator("scorer")
    @classmethod
    def _scorer(cls, v):
        if v is not None and v not in SCORERS:
            raise ValueError(f"unknown scorer {v!r}{did_you_mean(v, SCORERS)}; known: {', '.join(SCORERS.names())}")
        return v

    @model_validator(mode="after")
    def _dataset(self):
        for key in ("languages", "categories"):
            if getattr(self, key) == []:
                raise ValueError(f"{key}: [] selects nothing; leave {key} out to keep them all")
        if self.path is None and self.name not in DATASETS:
            raise ValueError(f"unknown dataset {self.name!r}{did_you_mean(self.name, DATASETS)}; known: "
                             f"{', '.join(DATASETS.names())} (or give `path:` to a file in the normalised format)")
        if self.exclude_audited is not None and (self.name != "locomo" or self.path is not None):
            raise ValueError("exclude_audited: the audit is of LoCoMo's answer key (dataset `locomo`)")
        return self

    def audit_path(self, data_dir=None) -> Path:
        """Where `exclude_audited` points: absolute, else under the data dir, else the working directory."""
        if self.exclude_audited is None:
            raise ValueError(f"dataset {self.key}: no exclude_audited")
        return under_data_dir(self.exclude_audited, data_dir)

    @property
    def key(self) -> str:
        return self.label or self.name

    def conversations(self, data_dir=None) -> list:
        """The conversations this spec keeps, in loader order: `first`, then `limit` of them."""
        limit = self.limit and self.first + self.limit
        convs = load_dataset(self.name, data_dir=data_dir, limit=limit, path=self.path)[self.first:]
        return by_session(convs) if self.granularity == "session" else convs

    @property
    def has_preferences(self) -> bool:
        """Whether the dataset declares user profiles (a preference block for K/V strategies)."""
        return bool(dataset_info(self.name, self.path).get("preferences"))

    def info(self) -> dict[str, Any]:
        """Version, language and scorer as declared, and `content`: the digest of the source files as they are
        now in $DKILAB_DATA_DIR (dkilab.eval.data.source_digest), so an edited file is a new cell."""
        meta = dataset_info(self.name, self.path)
        out = {"version": meta["version"], "language": self.language or meta["language"],
               "scorer": self.scorer or meta["scorer"],
               "content": source_digest(self.name, self.path)}
        if self.exclude_audited is not None:  # which golds are out, and the ceiling they left on the full set

            out["audit"] = audit_info(load_dataset(self.name), self.audit_path())
        return out


class JudgeSpec(_Strict):
    """Optional LLM judge (dkilab.eval.scoring.judge): a model spec as for `model.spec` (offline:smollm2,
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
    # a published judge protocol, its prompts read from the user's copy of its script (`prompts_from`: absolute,
    # or under the data dir, else the working directory): `longmemeval`, LongMemEval's answer check per question
    # type, unanswerable questions judged too (dkilab/eval/scoring/longmemeval_check.py); `locomo_j`, the
    # CORRECT/WRONG judge of the published LoCoMo memory-system tables (mem0's; dkilab/eval/scoring/locomo_j.py);
    # `evermemos`, the judge of the pipeline whose eval_results.json the LoCoMo audit publishes (its
    # evaluation/config/prompts.yaml; dkilab/eval/scoring/evermemos_judge.py)
    protocol: Literal["dkilab", "longmemeval", "locomo_j", "evermemos"] = knob("dkilab", off="dkilab")
    # the judge's own errors: beside each judged answer, a vague-but-wrong, a wrong-specific and a paraphrased-correct
    # answer built from the gold go to the same judge (dkilab/eval/scoring/judge_stress.py); 3 more calls per answer
    stress: bool = True
    prompts_from: str | None = knob(None, off=None)

    @model_validator(mode="after")
    def _placeholders(self):
        if self.prompt is not None:
            check_prompt(self.prompt)
        if self.abstention_prompt is not None:
            check_prompt(self.abstention_prompt, ("{question}", "{prediction}"))
        if (self.protocol != "dkilab") != (self.prompts_from is not None):
            raise ValueError(f"protocol: {self.protocol} and prompts_from go together (longmemeval: LongMemEval's "
                             "src/evaluation/evaluate_qa.py; locomo_j: mem0's evaluation/metrics/llm_judge.py; "
                             "evermemos: the pipeline's evaluation/config/prompts.yaml)")
        if self.protocol != "dkilab" and self.prompt is not None:
            raise ValueError(f"protocol: {self.protocol} reads its prompts from prompts_from; drop `prompt`")
        self.protocol_object()  # a missing or foreign script is refused when the config is read, naming it
        if "max_new_tokens" not in self.model_fields_set:  # room for the protocol's reply: a JSON label, a yes/no
            self.max_new_tokens = {"locomo_j": 24, "longmemeval": 10, "evermemos": 64}.get(self.protocol,
                                                                                           self.max_new_tokens)
        return self

    def _script(self) -> Path:
        return under_data_dir(str(self.prompts_from))

    def protocol_object(self) -> Any:
        """The published protocol the judge follows (None under dkilab's own prompt)."""
        if self.protocol == "longmemeval":
            return LongMemEval(load_templates(self._script()))
        if self.protocol == "locomo_j":
            return LocomoJ(load_template(self._script()))
        if self.protocol == "evermemos":
            return EverMemOSJudge(load_prompts(self._script()))
        return None

    def prompts(self) -> dict[str, str] | None:
        """A protocol's prompt texts by kind, as a person reads them (None under dkilab's own prompt)."""
        proto = self.protocol_object()
        if proto is None:
            return None
        if self.protocol == "longmemeval":
            return {kind: readable(text) for kind, text in proto.templates.items()}
        if self.protocol == "evermemos":
            return {"system": proto.system, "judge": proto.template}
        return {"judge": proto.template}

    def resolved(self) -> dict[str, Any]:
        # not identity
        unset = {k for k in ("dtype", "device") if getattr(self, k) is None} | {"batch_size", "prompts_from"}
        if self.protocol == "dkilab":
            unset.add("protocol")
        out = self.model_dump(exclude=unset) | {"prompt": self.prompt or text.JUDGE_PROMPT,
                                                "abstention_prompt": (self.abstention_prompt or text.ABSTENTION_PROMPT)
                                                if self.abstention else None}
        if self.protocol != "dkilab":  # the protocol's prompts decide, wherever the file lies

            out |= {"prompt": None, "templates_sha1": digest(self.prompts() or {})}
        weights = model_weights_digest(self.model)
        if weights:  # a judge trained again at the same path, an edited script, another model behind the endpoint
            out["weights"] = weights
        return out


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
    # scorers added by name after the built-in ones (`register_scorer` in dkilab/eval/scoring/, docs/extending.md);
    # in the scoring hash of every cell, which is re-scored from its stored answers when the list changes
    scorers: list[str] = Field(default_factory=list)
    # which abstention detector scores hallucination when no judge labels it: `hybrid` (rules where sure, a
    # logistic regression over e5 vectors elsewhere) or `structural` (the rules alone); in the scoring hash
    abstention_detector: Literal["hybrid", "structural"] = "hybrid"
    # share of a cell's questions allowed to fail (an exception, an endpoint that stayed down) before the
    # cell counts as FAILED and runs again; a judgement on the result, not part of a cell's identity
    max_error_rate: float = Field(0.0, ge=0.0, le=1.0)
    # evaluate: no cell may run a fitted component on the split it was fitted on (dkilab.eval.harness.fitted); tune:
    # a dev study of its own (split: dev allowed), whose figures are not held-back results
    purpose: Literal["evaluate", "tune"] = "evaluate"


SWEEP_ROOTS = ("params", "model", "embedder")
