"""Core data types shared by every package (see docs/architecture.md §1)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, overload, runtime_checkable


@overload
def to_utc(ts: None) -> None: ...
@overload
def to_utc(ts: datetime | str | float | int) -> datetime: ...
def to_utc(ts: datetime | str | float | int | None) -> datetime | None:
    """Normalise a timestamp to an aware UTC datetime (naive values are taken as UTC)."""
    if ts is None:
        return None
    if isinstance(ts, (int, float)):
        return datetime.fromtimestamp(ts, tz=timezone.utc)
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"timestamp {ts!r} is not ISO 8601") from exc
    if not isinstance(ts, datetime):
        raise TypeError(f"timestamp must be datetime, ISO string or epoch seconds, got {type(ts).__name__}")
    if ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)


@dataclass
class Message:
    """One chat message. `message_id` is the trace id used by recall, summaries and fact calls."""

    message_id: str
    user_id: str
    session_id: str
    turn_id: int
    role: str
    content: str
    timestamp: datetime
    topic: str | None = None
    speaker: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("message_id", "user_id", "session_id", "role"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Message.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.content, str):
            raise ValueError(f"Message {self.message_id!r}: content must be a string")
        self.user_id = str(self.user_id)
        self.turn_id = int(self.turn_id)
        self.timestamp = to_utc(self.timestamp)
        if self.timestamp is None:
            raise ValueError(f"Message {self.message_id!r}: timestamp is required")


@dataclass
class Hit:
    """A query result: the message and, where the tool ranks, its score."""

    message: Message
    score: float | None = None

    def __getattr__(self, name: str) -> Any:
        # hit.content, hit.message_id ... read through to the message
        if name == "message":
            raise AttributeError(name)
        return getattr(self.message, name)


@dataclass
class Page:
    """One page of a paged query. `next_cursor` is opaque and None on the last page."""

    items: list[Hit]
    next_cursor: str | None = None

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class QAItem:
    """One evaluation question about a conversation, in the normalised form every loader produces."""

    question: str
    answer: str | None
    category: str | int | None = None
    evidence_ids: list[str] = field(default_factory=list)  # message ids (trace ids) of the gold evidence
    answerable: bool = True
    question_date: datetime | None = None
    choices: dict[str, str] | None = None  # multiple choice: letter -> text; `answer` is then the letter
    qid: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # dataset-specific extras (gold details, ...)
    session_id: str | None = None  # the session the question is asked in (what "刚才 / just now" refers to)
    task: dict[str, Any] | None = None  # task inputs of an agent question (a pointer's tree, a dialogue's user)

    def __post_init__(self) -> None:
        # loaders and cached records written before these were fields carried them in `metadata`
        if self.session_id is None and self.metadata.get("session_id") is not None:
            self.session_id = str(self.metadata.pop("session_id"))
        if self.task is None and isinstance(self.metadata.get("task"), dict):
            self.task = self.metadata.pop("task")


@dataclass
class Conversation:
    """One user's history (messages in time order) and the questions asked about it."""

    conversation_id: str
    user_id: str
    messages: list[Message]
    questions: list[QAItem] = field(default_factory=list)
    language: str = "en"
    speakers: dict[str, str] = field(default_factory=dict)  # role -> speaker name
    preferences: list[str] = field(default_factory=list)  # a user profile, where the dataset has one
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class HistoryItem:
    """One entry of the visible history list: a verbatim message or a summary with its trace id."""

    type: str  # "summary" | "message"
    content: str
    trace_id: str
    role: str | None
    token_count: int
    confidence: str  # "high" (verbatim) | "medium" (summary) | "low"
    timestamp: datetime | None = None
    speaker: str | None = None  # who said it (LoCoMo names); rendered like every strategy's history lines


@dataclass
class RecalledMessage:
    """A recall candidate with its fused score and the per-signal scores that produced it."""

    message: Message
    score: float
    signals: dict[str, float] = field(default_factory=dict)


@dataclass
class RecallResult:
    messages: list[Message]  # final list: recent turns first, then recalled by relevance (deduplicated)
    keyword_hits: int = 0
    vector_hits: int = 0
    reference_scope: str | None = None
    recent_turns_added: int = 0
    ranked: list[RecalledMessage] = field(default_factory=list)  # relevance order, before the recent supplement
    keywords: list[tuple[str, float]] = field(default_factory=list)
    reference_hits: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class AssembledSuffix:
    text: str
    items: list[HistoryItem]
    total_tokens: int
    message_count: int
    summary_count: int
    has_fact_call_instruction: bool
    trace_ids: list[str]
    history_tokens: int = 0
    dropped_for_budget: int = 0
    history_text: str = ""  # the rendered items alone (no constraint, no query): what memory put there


@dataclass
class FactRequest:
    trace_id: str
    query: str | None = None
    offset: int = 0
    limit: int = 5


@dataclass
class FactResponse:
    messages: list[dict[str, str]]
    trace_id: str
    total_count: int
    offset: int
    has_more: bool
    found: bool = True
    error: str | None = None


@dataclass
class FactCall:
    """One fact call the model made: what it asked, whether it was valid, what it cost."""

    trace_id: str | None
    offset: int
    limit: int
    valid: bool
    tokens: int = 0
    found: bool = False
    malformed: bool = False
    round: int = 0
    kept: bool = True  # its segment reached the prompt (False: it would have passed max_fact_tokens)


@dataclass
class ContextBudget:
    """How a model's window is shared out for one question (seed recall-v4 §2.3), computed in one place
    (`Strategy.budget`) and recorded with every answer.

    `total` is the history budget every strategy gets for the same question and model (matched: the
    window minus the shared system prompt and template, the question, the preferences and
    max_new_tokens, capped by the `history_budget` param). `room` is what a strategy may append beyond
    its history when the model asks for it (recall_v4's fact segments, follow-ups and constraint): it is
    kept free in the window, not taken from the total. `reserved` is what a strategy takes from the total
    (the seed's §2.3 accounting, `recall.budget.reserve_from_history`; the recall agent's memory view), so
    what its history may fill is `history`; `used` is what its history did fill."""

    window: int  # the model's context window, or the strategy's `max_prompt_tokens` if lower
    generation: int  # reserved for what is generated: max_new_tokens
    instructions: int = 0  # system prompt, chat template, headers (the same for every strategy)
    query: int = 0
    preferences: int = 0
    cap: int | None = None  # the `history_budget` param: a cap on the total
    reserved: dict[str, int] = field(default_factory=dict)  # parts taken from the total: fact_calls, constraint
    used: int | None = None  # history tokens the strategy's selection filled (text lines or the K/V block)
    room: dict[str, int] = field(default_factory=dict)  # kept free beside the history: fact_calls, constraint

    @property
    def free(self) -> int:
        return max(0, self.window - self.preferences - self.instructions - self.query - self.generation)

    @property
    def total(self) -> int:
        return self.free if self.cap is None else max(0, min(self.free, self.cap))

    @property
    def history(self) -> int:
        return max(0, min(self.total, self.free - sum(self.room.values())) - sum(self.reserved.values()))

    def as_dict(self) -> dict[str, Any]:
        return {"window": self.window, "generation": self.generation, "instructions": self.instructions,
                "query": self.query, "preferences": self.preferences, "cap": self.cap, "total": self.total,
                "reserved": dict(self.reserved), "room": dict(self.room), "history": self.history, "used": self.used}


@dataclass
class Generation:
    """One model call: the text, the visible prompt's tokens, the new tokens, the K/V columns attended to."""

    text: str
    prompt_tokens: int
    new_tokens: int
    injected_tokens: int = 0
    token_ids: list[int] = field(default_factory=list, repr=False)


@dataclass
class Answer:
    """What a strategy did for one question: the answer and everything the metrics need."""

    text: str
    strategy: str = ""
    prompt_tokens: int = 0  # tokens of the final visible prompt (chat template included)
    injected_tokens: int = 0  # K/V memory columns the model attended to (0 for text-only strategies)
    generated_tokens: int = 0
    recalled_ids: list[str] = field(default_factory=list)  # message ids the strategy put before the model
    summary_ids: list[str] = field(default_factory=list)  # of those, the ones shown only as a summary
    fact_calls_offered: bool = False  # retrieve_fact was offered: a summary's message is one call away
    fact_calls: list[FactCall] = field(default_factory=list)
    rounds: int = 1  # generations run (the fact loop adds rounds)
    latency_ms: dict[str, float] = field(default_factory=dict)  # stage -> ms: recall, assembly, generation
    context_text: str = ""  # every memory text the model was given (prompt suffix, K/V memories, facts)
    prompt: str = ""  # the final visible prompt
    budget: ContextBudget | None = None  # the history budget the strategy worked within
    metadata: dict[str, Any] = field(default_factory=dict)
    # what the strategy produced (`Strategy.output_kind`), which decides the metrics that apply: answer (a
    # generated reply), ranking (recalled messages only), memory_view / pointer (an agent's output), context
    # (a context-only cell: prompt and K/V built, nothing generated)
    kind: str = "answer"
    review: dict[str, Any] = field(default_factory=dict)  # what a reviewer reads beside it: copied whole into its row


# --- what a strategy may call: the collaborators' protocols ---------------------------------
@runtime_checkable
class Memory(Protocol):
    """One user's memory as strategies and agents see it (`MemoryStore.for_user(...)`, or a client of
    the recall service): the four query tools of seed recall-agent §3 plus `get` and two conveniences.
    No method takes a user id."""

    @property
    def user_id(self) -> str: ...

    def get(self, message_id: str) -> Message: ...

    def messages_list(self, since=None, until=None, role: str | None = None, page_size: int = 50,
                      cursor: str | None = None) -> Page: ...

    def lexical_search(self, query_text: str, filter=None, page_size: int = 20, cursor: str | None = None) -> Page: ...

    def semantic_search(self, query_text: str | None = None, query_embedding=None, filter=None, top_k: int = 10,
                        min_score: float | None = None) -> Page: ...

    def neighbors(self, message_id: str, before: int = 5, after: int = 5) -> list[Message]: ...

    def session_messages(self, session_id: str) -> list[Message]: ...

    def recent(self, n: int, session_id: str | None = None) -> list[Message]: ...

    def speakers(self) -> dict[str, set[str]]: ...

    def count(self) -> int: ...

    @property
    def source(self) -> str:
        """Where this memory lives (a store's path, or the service's URL): with `user_id` and `count`, the
        key of anything cached from it, so no cache is shared across stores."""
        ...


@runtime_checkable
class ChatModel(Protocol):
    """A chat model as strategies see it: a local transformers model (`dkilab.models.TransformersChatModel`,
    K/V access) or a served one (`OpenAIChatModel`, text only). `generate_full` returns a Generation
    (text, prompt_tokens, new_tokens, injected_tokens)."""

    name: str
    context_window: int
    supports_kv: bool

    def count_tokens(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...

    def render(self, messages_or_prompt, tools: list[dict] | None = None) -> str: ...

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None) -> str: ...

    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation: ...


# --- capabilities beyond ChatModel and Memory: declared here, asked with isinstance --------------------------
@runtime_checkable
class KVModel(Protocol):
    """A local transformers model (`TransformersChatModel`): its module and tokenizer, K/V memory blocks in its
    attention (`supports_kv`), `batch_size` questions decoded together. The tokenizer-only stand-in of a
    context-only cell has this shape with `model` None (nothing to inject into)."""

    supports_kv: bool
    model: Any
    tokenizer: Any
    batch_size: int


@runtime_checkable
class ConcurrentModel(ChatModel, Protocol):
    """A model asked `concurrency` questions at a time (an endpoint, a scripted model)."""

    concurrency: int


@runtime_checkable
class BatchModel(Protocol):
    """A model that generates several prompts in one call (a local model's padded batch, an endpoint's
    concurrent requests): greedy, so each reply is the one-by-one reply."""

    def generate_batch(self, prompts: list, max_new_tokens: int = 64, **kw: Any) -> list[Generation]: ...


@runtime_checkable
class TokenizedModel(Protocol):
    """A model that may carry its own tokenizer (its chat template, whether it offers tools); None when it has none."""

    tokenizer: Any


@runtime_checkable
class ServedModel(Protocol):
    """A model behind an endpoint: the name the server knows it by (what a trace's `mlflow.llm.model` shows)."""

    model_name: str


@runtime_checkable
class MemoryTextModel(Protocol):
    """A model that reads a K/V memory block as its text (the oracle), so nothing is encoded for it."""

    reads_memory_text: bool


@runtime_checkable
class MemoryBlock(Protocol):
    """A K/V memory block as a model is handed it (`models.kv.MemoryKV`, or the block a context-only cell or the
    oracle is given: `strategies.base.PlannedKV`): the text it holds and its token count."""

    text: str

    @property
    def n_tokens(self) -> int: ...


@runtime_checkable
class WindowedModel(Protocol):
    """What fitting a prompt in a model's window needs: its window and its token count (every ChatModel; a policy
    given something less assumes a prompt fits)."""

    context_window: int

    def count_tokens(self, text: str) -> int: ...


@runtime_checkable
class EncodedMemory(Memory, Protocol):
    """A memory that names the encoder its vectors are from (a store's view, the recall service's client): the
    learned fusion picks its part by it."""

    @property
    def encoder_name(self) -> str | None: ...


@runtime_checkable
class VectorMemory(EncodedMemory, Protocol):
    """A memory that holds its messages' vectors (a store's user view, not the recall service's client): the learned
    fusion reads cosines and neighbouring turns from it in one lookup instead of searching."""

    embedder: Any

    def similarities(self, query_embedding, message_ids: list[str]) -> dict[str, float]: ...

    def adjacent(self, message_ids: list[str], reach: int = 1) -> dict[str, tuple[str | None, ...]]: ...
