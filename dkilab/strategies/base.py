"""The strategy interface, its registration, and what several strategies share (prompts, budget,
timing, K/V cache).

`strategy.answer(question, memory, model, *, session_id=None, preferences=None) -> Answer`, where
`memory` is a user-bound `Memory` (`store.for_user(...)`) and `model` a `ChatModel` (both protocols
in `dkilab.types`). A new strategy is one file in this package: subclass `Strategy`, give it a
`name`, a `Params` model and a `version`, decorate it with `@register`; the registry discovers it.
Bump `version` when a change alters what the strategy does with the same params: finished cells of
the old version then run again.
"""
from __future__ import annotations

import threading
import time
import weakref
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

from cachetools import LRUCache
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dkilab import prompts as text
from dkilab import tracing
from dkilab.config import drop_nested, knob, merge_nested, refuse_bool_numbers, validate
from dkilab.models.tool_calls import has_call
from dkilab.prompts import HISTORY_HEAD, PREFERENCES_HEAD, QUESTION, SYSTEM  # prompt texts: dkilab/prompts.py
from dkilab.recall import MultiSignalRecall, RecallConfig, create_reference_resolver, temporal
from dkilab.recall.config import PRESETS
from dkilab.recall.learned import load_model
from dkilab.recall.signals import SIGNALS
from dkilab.registry import Registry
from dkilab.text.history import DEFAULT_FIELDS, render_line
from dkilab.text.lang import detect_language
from dkilab.tracing import span
from dkilab.types import (
    Answer,
    ChatModel,
    ContextBudget,
    Generation,
    Hit,
    KVModel,
    Memory,
    MemoryTextModel,
    Message,
)

if TYPE_CHECKING:
    from dkilab.models.response_cache import ResponseCache

TEMPLATE_TOKENS = 64  # what a chat template adds around the system and user messages (a generous bound)


def register(cls: type["Strategy"]) -> type["Strategy"]:
    """Class decorator: `@register class MyStrategy(Strategy): name = "my_strategy" ...`."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a `name`")
    STRATEGIES.add(cls.name, cls, version=cls.version, needs_model=cls.needs_model, uses_kv=cls.uses_kv)
    return cls


KV_CACHE_BYTES = 2 * 1024**3  # cached K/V blocks per strategy and model (LRU by bytes)

class StrategyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: int = Field(48, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0)
    preferences: list[str] | None = None  # used when the dataset has no user profile
    max_prompt_tokens: int | None = Field(None, ge=64)  # cap below the model's window (CPU budgets)
    # the history budget, in the model's tokens, the same for every strategy (None = all the window
    # leaves); a strategy that needs room of its own (fact segments) takes it from this total
    history_budget: int | None = Field(None, ge=0)
    # what a history line carries besides the text: time and speaker; [] = the seed's `User: text`
    history_fields: list[Literal["time", "speaker"]] = Field(default_factory=lambda: list(DEFAULT_FIELDS))

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        return refuse_bool_numbers(cls, data)

    @classmethod
    def applicable_defaults(cls, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
        """The experiment's `defaults:` that reach a strategy given these params (all of them, here)."""
        return defaults


class Stages:
    """Per-stage wall-clock milliseconds, accumulated."""

    def __init__(self):
        self.ms: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str, **inputs):
        """Time a stage (and trace it as a span when the runner traces); yields a dict for span outputs."""
        t = time.perf_counter()
        try:
            with span(stage, **inputs) as out:
                yield out
        finally:
            self.ms[stage] = self.ms.get(stage, 0.0) + (time.perf_counter() - t) * 1000


class StarvedBudget(ValueError):
    """A question whose history would get less than half the matched budget (its room or reserve took the
    rest): an error row naming the parts, never a silently short answer."""


def no_call_left(answer: Answer) -> Answer:
    """A call left in a reply (calls off, no loop, a call cut off at max_new_tokens, a syntax the loop did not
    read) is no answer: its text moves to `final_output` and it is a `final_call`, scored as no answer and
    never as a decline nor a hallucination. Every strategy's reply passes here, and so does every answer
    scored (`eval/harness/cell.py`: re-scored and imported answers too)."""
    if answer.kind == "answer" and not answer.metadata.get("final_call") and has_call(answer.text):
        answer.metadata.update(final_call=True, final_output=answer.text, leftover_call=True)
        answer.text = ""
    return answer


@dataclass(frozen=True)
class Needs:
    """What a configured strategy needs from the harness, in one record (`Strategy.needs`): whether to load a
    model under test, whether it injects K/V blocks (a local transformers model), whether it has a context-only
    mode and generates while it builds its context (a context-only cell then loads the whole model, not its
    tokenizer), and whether its answers are read from a published file (nothing generated)."""
    model: bool = True
    kv: bool = False
    context_only: bool = True
    generates_in_assembly: bool = False
    answers_from_file: bool = False


class Strategy(ABC):
    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"  # part of a cell's identity: bump when behaviour changes under the same params
    Params: ClassVar[type[StrategyParams]] = StrategyParams
    uses_kv: ClassVar[bool] = False  # injects K/V memory (needs a local transformers model)
    needs_model: ClassVar[bool] = True  # False: the runner loads no model for it (recall_only)
    takes_task_inputs: ClassVar[bool] = False  # True: _answer also gets asked_at= and task= (agents)
    # False: the strategy generates outside `Strategy.generate` (its own flow), so `model.generate: false`
    # cannot stop it before generation and is refused when the experiment is read
    supports_context_only: ClassVar[bool] = True
    # True: the runner reads the answers from the strategy's file (`imported`, dkilab.eval.data.published) and never
    # calls `answer`
    answers_from_file: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any] | StrategyParams | None = None, source: str = "<params>", *,
                 kv_cache_bytes: int = KV_CACHE_BYTES, response_cache: Callable[[], ResponseCache] | None = None):
        """`kv_cache_bytes`: what its cached K/V blocks may hold per model (the experiment's `model.kv_cache_mb`);
        `response_cache`: what opens the response cache its greedy generations are kept in (`model.cache`), called
        on the first generation, so a cell that never generates opens nothing."""
        # context-only (`model: {generate: false}`): build exactly the prompt and K/V blocks, then stop
        self.context_only = False
        if isinstance(params, StrategyParams):
            self.params = params
        else:
            self.params = validate(self.Params, params or {}, source, f"{self.name} params", prefix=self.name)
        # model -> {text: K/V}: held by the model object itself (weakly), so a model that is gone and a new
        # one that reuses its memory address never share entries
        self._kv_cache: weakref.WeakKeyDictionary[Any, LRUCache] = weakref.WeakKeyDictionary()
        self._kv_lock = threading.Lock()
        self.kv_cache_bytes = kv_cache_bytes
        self._open_responses = response_cache
        self._responses: ResponseCache | None = None

    @property
    def response_cache(self) -> ResponseCache | None:
        """The response cache (opened on first use), None when the experiment keeps none."""
        if self._responses is None and self._open_responses is not None:
            self._responses = self._open_responses()
        return self._responses

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params.model_dump(exclude_defaults=True)})"

    def answer(self, question: str, memory: Memory, model: ChatModel | None, *, session_id: str | None = None,
               preferences: list[str] | str | None = None, asked_at=None, task: dict | None = None) -> Answer:
        """`asked_at` (when the question is asked) and `task` (a dataset's task inputs, e.g. an agent tree;
        never gold) reach strategies that declare `takes_task_inputs`."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{self.name}: the question must be a non-empty string, got {question!r}")
        prefs = preferences if preferences is not None else self.params.preferences
        prefs = [prefs] if isinstance(prefs, str) else [p for p in (prefs or []) if p and p.strip()]
        stages = Stages()
        extra = {"asked_at": asked_at, "task": task or {}} if self.takes_task_inputs else {}
        answer = self._answer(question, memory, model, session_id=session_id, preferences=prefs, stages=stages, **extra)
        answer.strategy = self.name
        answer.latency_ms = {**stages.ms, **answer.latency_ms}
        answer.kind = "context" if self.context_only else self.output_kind
        return no_call_left(answer)

    @property
    def output_kind(self) -> str:
        """What this configuration produces (Answer.kind): answer, ranking, memory_view or pointer."""
        return "answer"

    @abstractmethod
    def _answer(self, question: str, memory: Memory, model: ChatModel | None, *, session_id: str | None,
                preferences: list[str], stages: Stages) -> Answer:
        ...

    def needs(self, preferences: bool = True) -> Needs:
        """This configuration's needs (`preferences`: whether the cell's data has any): what the harness reads of
        a strategy, from the methods and flags a subclass sets below."""
        return Needs(model=self.requires_model(), kv=self.needs_kv(preferences),
                     context_only=self.supports_context_only, generates_in_assembly=self.generates_in_assembly(),
                     answers_from_file=self.answers_from_file)

    def requires_model(self) -> bool:
        """Whether these params need a model (the runner loads none otherwise)."""
        return self.needs_model

    def generates_in_assembly(self) -> bool:
        """Whether building the context itself runs the model (LLM summaries, an LLM policy): a
        context-only cell then loads the whole model, otherwise its tokenizer alone."""
        return False

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        """Params (dotted, under `params`) that cannot change what this configuration does, with the
        reason: a sweep over one of them is refused when the experiment file is read.
        `has_preferences`: whether the dataset or `params.preferences` gives a preference block."""
        out = {}
        if not generate:
            out["temperature"] = "model.generate is false: nothing is generated"
        if "preference_alpha" in type(self.params).model_fields:
            if not has_preferences:
                out["preference_alpha"] = ("there is no preference block to scale: the dataset has no user "
                                           "preferences and params.preferences is not set")
            elif not generate:
                out["preference_alpha"] = "model.generate is false: alpha scales attention, not the context"
        return out

    def identity(self, model_name: str = "") -> dict[str, Any]:
        """Everything besides the params that decides what this strategy does (hashed into a cell's
        identity): its version and its prompts. Subclasses add components configured in code."""
        return {"version": self.version, "prompts": self.prompts(model_name)}

    def cards(self) -> dict[str, Any]:
        """Measured figures of a component this strategy relies on (e.g. the recall agent's adjudication on
        its conflict set), logged with each cell as `strategy.cards.*` params; empty for most strategies."""
        return {}

    def prompts(self, model_name: str = "") -> dict[str, str]:
        """The prompt texts this strategy sends (logged with each cell and part of its identity)."""
        return {f"system.{lang}": t for lang, t in text.SYSTEM.items()} | {
            f"question.{lang}": QUESTION[lang] for lang in QUESTION} | {
            f"history_head.{lang}": HISTORY_HEAD[lang] for lang in HISTORY_HEAD} | {
            f"preferences_head.{lang}": PREFERENCES_HEAD[lang] for lang in PREFERENCES_HEAD}

    def needs_kv(self, preferences: bool = True) -> bool:
        """Whether this configuration injects K/V memories (a model must support them); `preferences`:
        whether the cell's data has any (strategies that inject only preferences need K/V for them)."""
        return self.uses_kv

    def check_model(self, model: ChatModel, preferences: bool = True) -> None:
        """Refuse, before the first question, a model this strategy cannot run on (the cell fails once
        with the reason instead of one error row per question)."""
        if self.needs_kv(preferences):
            self.require_kv(model, "memory")
            # context-only, tokenizer alone: nothing is injected, nothing to check
            if not isinstance(model, KVModel) or model.model is None:
                return
            from dkilab.models.kv import check_support

            check_support(model.model)

    # --- shared helpers ------------------------------------------------------------------
    def require_kv(self, model: ChatModel, why: str) -> None:
        if not model.supports_kv:
            from dkilab.models.kv import KVUnsupportedError

            raise KVUnsupportedError(f"strategy {self.name!r} injects {why} as K/V memory and needs a local "
                                     f"transformers model; {model!r} has no K/V access")

    def memory_kv(self, model: ChatModel, text: str):
        """Encode `text` once per model and reuse it (bounded LRU; the K/V of a text depends only on the
        model and the text, so it is safe to share across users). Context-only: the block as planned
        (its text and token count), never encoded."""
        if self.context_only or isinstance(model, MemoryTextModel):  # the oracle reads the text
            return PlannedKV(text, model.count_tokens(text))
        from dkilab.models.kv import encode_memory

        with self._kv_lock:  # the runner answers `batch_size` questions in threads; an LRU is not thread-safe
            cache = self._kv_cache.get(model)
            if cache is None:  # LRU bounded in bytes; each block counts at least 1/256 of the cap (<= 256 blocks)
                floor = max(1, self.kv_cache_bytes // 256)
                cache = self._kv_cache[model] = LRUCache(self.kv_cache_bytes,
                                                         getsizeof=lambda kv: max(getattr(kv, "nbytes", 0), floor))
            if (kv := cache.get(text)) is not None:
                return kv
        kv = encode_memory(model, text)  # outside the lock: other questions' blocks encode meanwhile
        with self._kv_lock:
            try:
                cache[text] = kv
            except ValueError:  # one block larger than the whole cap: used, not kept
                pass
        return kv

    def release(self) -> None:
        """Drop every cached K/V block (the runner calls it when the cell ends: an 8B model's blocks are GiBs)."""
        self._kv_cache.clear()

    def preference_memories(self, model: ChatModel, preferences: list[str], lang: str, alpha: float) -> tuple[list,
                                                                                                              str]:
        """([(preference K/V, alpha)] or [], the preference text): the seed's L0 block, encoded once."""
        pref = preferences_text(preferences, lang)
        if not pref:
            return [], ""
        self.require_kv(model, "preferences")
        return [(self.memory_kv(model, pref), alpha)], pref

    def window(self, model: ChatModel) -> int:
        """Tokens the model may see: its window, or the configured `max_prompt_tokens` if lower."""
        cap = self.params.max_prompt_tokens
        return min(model.context_window, cap) if cap else model.context_window

    def budget_parts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(room, reserved) of this strategy's params: tokens it may append beyond its history when the
        model asks (kept free in the window), and tokens it takes out of the matched history budget."""
        return {}, {}

    def budget(self, model: ChatModel, question: str, lang: str, preferences: str = "",
               reserved: dict[str, int] | None = None, room: dict[str, int] | None = None) -> ContextBudget:
        """The history budget of one question (ContextBudget), computed alike for every strategy: the
        window minus the system prompt and template, the question, the preference text and
        max_new_tokens, capped by `history_budget`; `reserved` = what this strategy takes from it, `room`
        = what it keeps free beside it."""
        instructions = model.count_tokens(SYSTEM[lang] + "\n" + HISTORY_HEAD[lang]) + TEMPLATE_TOKENS
        b = ContextBudget(window=self.window(model), generation=self.params.max_new_tokens,
                          instructions=instructions, query=model.count_tokens(question_text(question, lang)),
                          preferences=model.count_tokens(preferences) if preferences else 0,
                          cap=self.params.history_budget, reserved=dict(reserved or {}), room=dict(room or {}))
        if b.total and b.history < b.total / 2:  # the load check estimated; this question's real counts say no
            parts = ", ".join(f"{k} {v}" for k, v in (*b.room.items(), *b.reserved.items()))
            raise StarvedBudget(f"{self.name}: history {b.history} of the matched budget {b.total} (< half) for this "
                                f"question: window {b.window} = instructions {b.instructions} + question {b.query} + "
                                f"preferences {b.preferences} + generation {b.generation} + {parts} + history; "
                                "raise the window or lower history_budget, the fact room or the reserve")
        return b

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.params.history_fields)

    def generate(self, model: ChatModel, user_text: str, lang: str, memories=None, system_extra: str | None = None,
                 tools: list[dict] | None = None, turns: list[dict] | None = None):
        """Chat-template the system + user message (+ `turns`: tool calls and results) and generate ->
        (Generation, prompt text). `tools` are offered through the model's chat template."""
        system = SYSTEM[lang] + (f"\n{system_extra}" if system_extra else "")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user_text}, *(turns or [])]
        kw: dict[str, Any] = {"tools": tools} if tools else {}
        if self.context_only:  # the prompt as the model would get it, counted as generate_full counts it
            prompt = model.render(messages, **kw)
            injected = 1 + sum(m.n_tokens for m, a in memories if a > 0) if memories else 0
            return Generation("", model.count_tokens(prompt), 0, injected), prompt
        cache, key = self.response_cache, None
        if cache is not None and self.params.temperature == 0:
            key = cache.key(model, messages, self.params.max_new_tokens, tools, memories)
            hit = cache.get(key)
            if hit is not None:
                return hit, model.render(messages, **kw)
        gen = model.generate_full(messages, max_new_tokens=self.params.max_new_tokens,
                                  temperature=self.params.temperature, memories=memories, **kw)
        if key is not None and cache is not None:
            cache.put(key, model, gen)
        return gen, model.render(messages, **kw)


STRATEGIES: Registry[type[Strategy]] = Registry("strategy", discover="dkilab.strategies", subclass_of=Strategy)


class ReferenceParams(BaseModel):
    """The reference resolver (seed reference-resolver) as an experiment chooses it: an optional resolver
    YAML (the keys of `ReferenceResolverConfig`, e.g. extra mappings) and the turn windows on top."""
    model_config = ConfigDict(extra="forbid")
    config: str | None = None  # path of a resolver YAML
    last_few_turns: int | None = Field(None, ge=1)  # 刚才 / just now
    recent_turns: int | None = Field(None, ge=1)  # 最近 / recently
    session_max_turns: int | None = Field(None, ge=1)  # 这次 / this session


# `seed: true`: the whole pipeline as seed recall-v4 writes it (§2.2-2.5 and §6): its recall stage (`recall:
# {preset: seed}`, with the recent-turn supplement), the summary threshold and size, the §2.3 accounting with its
# reserves taken from the history budget, the fact-call values, the text protocol through the model's own
# formatter (Generic, DeepSeek, GLM: `prompt_formatter: auto`) and the seed's `User: text` history lines
SEED_PIPELINE: dict[str, Any] = {
    "history_fields": [],
    "recall": {"preset": "seed", "strategy": "summary_with_fact_call", "prompt_formatter": "auto",
               "budget": {"generation_reserve": 512, "instruction_reserve": 150, "min_recent_turns": 2,
                          "max_recent_turns": 5, "reserve_from_history": True},
               "summary": {"per_message_threshold": 200, "max_tokens_per_summary": 150, "strategy": "extractive"},
               "fact_call": {"enabled": True, "max_rounds": 3, "max_fact_tokens": 800, "batch_size": 5,
                             "protocol": "text"}}}
# every key a `seed: true` row takes from the seed, its recall preset's included: none of them comes from `defaults:`
_SEED_KEYS = merge_nested(SEED_PIPELINE, {"recall": PRESETS["seed"]})


class RecallParams(StrategyParams):
    """Params of strategies that run MultiSignalRecall: the seed's `recall:` block, the reference
    resolver and a result cap. `seed: true` sets every value `SEED_PIPELINE` holds; keys given beside it (the
    strategy's own params, a sweep point) move one value off the seed's, and an experiment's `defaults:` for
    those keys do not reach it (they are the tuned rows' values)."""
    seed: bool = knob(False, off=False)
    recall: RecallConfig = Field(default_factory=RecallConfig)
    reference: ReferenceParams = Field(default_factory=ReferenceParams)
    max_results: int = Field(50, ge=1, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _seed(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("seed") is True:
            return merge_nested(SEED_PIPELINE, data)
        return data

    @classmethod
    def applicable_defaults(cls, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
        return drop_nested(defaults, _SEED_KEYS) if params.get("seed") is True else defaults


class RecallingStrategy(Strategy):
    """A strategy whose history comes from multi-signal recall (recall_v4, full_attention)."""
    Params: ClassVar[type[StrategyParams]] = RecallParams
    params: RecallParams
    takes_task_inputs = True  # asked_at: date cues ("last week") resolve against when the question is asked

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        r = self.params.reference
        self.resolver = create_reference_resolver(r.config, last_few_turns=r.last_few_turns,
                                                   recent_turns=r.recent_turns, session_max_turns=r.session_max_turns)

    def identity(self, model_name: str = "") -> dict[str, Any]:
        """What defines this strategy beyond its params: the resolver's full configuration (its mappings), the
        version of the date rules where `temporal_focus` reads them, and, under learned fusion, the digest of the
        fusion model's weights, cue rule and date rules (retrained weights are another cell)."""
        out = super().identity(model_name) | {"reference_resolver": self.resolver.config.model_dump(mode="json")}
        if self.params.recall.signals.temporal_focus > 0:  # the date rules decide its window (recall/temporal.py)

            out["date_rules"] = temporal.RULES
        if self.params.recall.signals.plugins:  # a signal's version: its scores changed, its cells run again

            out["signals"] = {n: SIGNALS.meta(n)["version"] for n in sorted(self.params.recall.signals.plugins)}
        card = self._fusion_card()
        return out | ({"fusion_model": card["digest"]} if card else {})

    def cards(self) -> dict[str, Any]:
        card = self._fusion_card()
        if not card:
            return super().cards()
        fusion = {k: card[k] for k in ("version", "digest")}
        if self.params.recall.signals.plugins:  # the switched-on signals' features the model gives zero weight

            columns = load_model(self.params.recall.signals.fusion_model).columns
            unfitted = [f for n in sorted(self.params.recall.signals.plugins) for f in SIGNALS.meta(n)["features"]
                        if f not in columns]
            fusion |= {"unfitted_features": ", ".join(unfitted)} if unfitted else {}
        return super().cards() | {"fusion_model": fusion}

    def _fusion_card(self) -> dict[str, Any] | None:
        signals = self.params.recall.signals
        if signals.fusion != "learned":
            return None

        return load_model(signals.fusion_model).card()

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        """The recall block's suffix knobs do nothing here: only recall_v4 summarises and offers fact calls."""
        out = super().inert_params(has_preferences, generate)
        why = f"{self.name} does not build a recall-v4 suffix (no summaries, no fact calls)"
        for key in ("recall.strategy", "recall.summary", "recall.fact_call", "recall.prompt_formatter",
                    "recall.budget.generation_reserve", "recall.budget.instruction_reserve"):
            out[key] = why
        return out

    def recall_messages(self, question: str, memory: Memory, session_id: str | None, asked_at=None) -> list[Message]:
        """Recall result in priority order: recent turns first, then by fused relevance."""
        return self.recall_result(question, memory, session_id, asked_at).messages

    def recall_result(self, question: str, memory: Memory, session_id: str | None, asked_at=None):
        """The whole RecallResult: `messages` (recent turns, then by relevance) and `ranked` (relevance only)."""
        p = self.params
        msr = MultiSignalRecall(p.recall, self.resolver, memory)
        result = msr.recall(question, session_id=session_id, max_results=p.max_results, asked_at=asked_at)
        if tracing.active():  # the retriever span shows what came back, with scores and signals
            ranked = {r.message.message_id: r for r in result.ranked}
            tracing.record(documents=tracing.documents(ranked.get(m.message_id, m) for m in result.messages),
                           reference_scope=result.reference_scope, keywords=[k for k, _ in result.keywords])
        return result


class PlannedKV:
    """A K/V block as a context-only cell plans it: the text it would encode and its token count."""

    def __init__(self, text: str, n_tokens: int):
        self.text, self.n_tokens = text, n_tokens


def language_of(question: str) -> str:
    return detect_language(question)


def history_line(m: Message, lang: str, fields=DEFAULT_FIELDS) -> str:
    """`[2023-05-08 13:56] Caroline: text` — speaker names and dates matter to the questions; every
    strategy renders history through this (and recall_v4's formatter through the same `render_line`)."""
    return render_line(m.content, m.role, lang, m.timestamp, m.speaker, fields)


def history_block(messages: list[Message], lang: str, fields=DEFAULT_FIELDS) -> str:
    if not messages:
        return ""
    return "\n".join([HISTORY_HEAD[lang], *(history_line(m, lang, fields) for m in messages)])


def line_cost(m: Message, model: ChatModel, lang: str, fields=DEFAULT_FIELDS) -> int:
    """What one history line costs in the prompt: its tokens and the newline."""
    return model.count_tokens(history_line(m, lang, fields)) + 1


def newest_that_fit(messages: list[Message], model: ChatModel, budget: int, lang: str, fields=DEFAULT_FIELDS
                    ) -> tuple[list[Message], int]:
    """(the newest messages whose history lines fit `budget` tokens, oldest first; the tokens they use)."""
    keep, used = len(messages), 0
    for i in range(len(messages) - 1, -1, -1):
        cost = line_cost(messages[i], model, lang, fields)
        if used + cost > budget:
            break
        used += cost
        keep = i
    return messages[keep:], used


def first_that_fit(messages: list[Message], model: ChatModel, budget: int, lang: str, fields=DEFAULT_FIELDS
                   ) -> tuple[list[Message], int]:
    """(messages taken in priority order until the next would overflow `budget`, shown in time order; tokens)."""
    chosen, used = [], 0
    for m in messages:
        cost = line_cost(m, model, lang, fields)
        if used + cost > budget:
            break
        chosen.append(m)
        used += cost
    return sorted(chosen, key=lambda m: (m.timestamp, m.turn_id)), used


def preferences_text(preferences: list[str], lang: str) -> str:
    return "\n".join([PREFERENCES_HEAD[lang], *(f"- {p}" for p in preferences)]) + "\n" if preferences else ""


def question_text(question: str, lang: str, history: str = "") -> str:
    return (history + "\n\n" if history else "") + QUESTION[lang].format(q=question)


def all_messages(memory) -> list[Message]:
    """Every message of the user, oldest first (paged through messages_list)."""
    out: list = []
    cursor = None
    while True:
        page = memory.messages_list(page_size=1000, cursor=cursor)
        out.extend(h.message if isinstance(h, Hit) else h for h in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return out
