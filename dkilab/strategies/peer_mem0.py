"""peer_mem0: mem0's open-source memory (`mem0ai`, pinned) as an answering strategy, beside the seeds' strategies.

mem0 reads the user's history `batch` messages at a time (its LoCoMo evaluation adds two at a time) and has an
LLM extract memories from each batch, deduplicated against the ones it holds; a question searches them (top
`top_k` by cosine) and the memories that fit the cell's matched history budget, best first, are shown with the
same answer prompt as every other strategy. The LLM is the cell's own model (the in-process model, or the served
one of an `openai:` spec), and the embedder dkilab's stock MiniLM: mem0's LLM and embedder objects are swapped
for adapters after it is configured, so it never reaches a network. Its vector store is FAISS in a temporary
folder, one mem0 memory per store, user and message count for the cell.

Where mem0's open-source pipeline differs from its hosted one: the extraction prompt's observation date is the
run's date (a timestamp is "platform-only" in mem0 OSS), so each message goes in as `[date] Speaker: text`
(peers render turns so) for the model to date what it extracts; and FAISS has no keyword index, so mem0's hybrid
BM25 scoring is off (it says so). Ingestion costs one model call per batch: on LoCoMo about 300 per conversation.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from pydantic import Field

from dkilab.encoders.embedder import Embedder
from dkilab.strategies._peers import need, render
from dkilab.strategies.base import (
    Strategy,
    StrategyParams,
    first_that_fit,
    history_block,
    language_of,
    preferences_text,
    question_text,
    register,
)
from dkilab.types import Answer, Message

EXTRACTION_TOKENS = 512  # room for mem0's JSON list of extracted memories


class Mem0Params(StrategyParams):
    batch: int = Field(2, ge=1, le=50)  # messages per mem0 `add` (one extraction call each)
    top_k: int = Field(20, ge=1, le=200)  # memories searched per question, then fitted to the history budget


class ExtractionFailed(RuntimeError):
    """mem0 stored nothing for a user because the model's extraction replies could not be parsed."""


@register
class PeerMem0(Strategy):
    name = "peer_mem0"
    version = "2"  # a user with no memory stored after unparsed extraction replies is an error row
    Params: ClassVar[type[StrategyParams]] = Mem0Params
    params: Mem0Params
    package: ClassVar[str] = "mem0ai==2.2.1"
    supports_context_only = False  # its memories are extracted by the model

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        self._memories: dict[tuple, Any] = {}  # the user's mem0 memory, or the exception its build raised
        self._stats: dict[tuple, dict[str, int]] = {}  # extraction calls, replies mem0 could not parse, memories
        self._lock = threading.Lock()
        self._dir: tempfile.TemporaryDirectory | None = None
        self._embedder: Any = None  # one MiniLM for every user of the cell (loaded on first use)

    def identity(self, model_name: str = "") -> dict[str, Any]:
        try:
            installed = version("mem0ai")
        except PackageNotFoundError:
            installed = "not installed"
        return super().identity(model_name) | {"peer": f"mem0ai {installed}"}

    def memory_for(self, memory, model) -> Any:
        """The user's mem0 memory, built from their whole history on first use (keyed by store, user and count).
        A build that fails (an exception mid-ingestion, or no memory stored while extraction replies failed to
        parse: mem0 then logs and stores nothing) fails every question of the user, and is not tried again."""
        count = memory.count()
        key = (memory.source, memory.user_id, count)
        with self._lock:
            if key not in self._memories:
                stats = self._stats.setdefault(key, {"calls": 0, "failures": 0, "stored": 0})
                try:
                    mem = self._build(memory.recent(count) if count else [], memory.user_id, model,
                                      len(self._memories), stats)
                    stats["stored"] = len(mem.get_all(filters={"user_id": memory.user_id}, top_k=100_000)["results"])
                    if count and not stats["stored"] and stats["failures"]:
                        raise ExtractionFailed(f"peer_mem0: user {memory.user_id}: no memory stored: "
                                               f"{stats['failures']} of {stats['calls']} extraction replies were not "
                                               "the JSON mem0 reads (a model that cannot follow its extraction prompt)")
                    self._memories[key] = mem
                except Exception as exc:  # noqa: BLE001 - kept: the user's other questions fail with it, once built
                    self._memories[key] = exc
            found = self._memories[key]
        if isinstance(found, Exception):
            raise found
        return found

    def stats_for(self, memory) -> dict[str, int]:
        """Extraction calls, replies mem0 could not parse and memories stored for the user (after memory_for)."""
        return dict(self._stats.get((memory.source, memory.user_id, memory.count()), {}))

    def _build(self, messages: list[Message], user_id: str, model, n: int, stats: dict[str, int]) -> Any:
        os.environ.setdefault("MEM0_TELEMETRY", "False")  # no usage events sent anywhere
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="dkilab-mem0-")
        os.environ.setdefault("MEM0_DIR", self._dir.name)
        mem0 = need("mem0", self.package)

        for name in ("mem0.memory.telemetry", "mem0.memory.main"):  # even if mem0 was imported before the variable
            if name in sys.modules:
                setattr(sys.modules[name], "MEM0_TELEMETRY", False)

        if self._embedder is None:
            self._embedder = Embedder()
        embedder = self._embedder
        unused = {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9"}  # replaced below: never called
        folder = os.path.join(self._dir.name, f"u{n}")
        mem = mem0.Memory.from_config({
            "llm": {"provider": "openai", "config": unused},
            "embedder": {"provider": "openai", "config": unused | {"embedding_dims": embedder.dim}},
            "vector_store": {"provider": "faiss", "config": {"collection_name": "dkilab", "path": folder,
                                                            "embedding_model_dims": embedder.dim}},
            "history_db_path": os.path.join(folder, "history.db")})
        mem.llm, mem.embedding_model = _llm(model, stats), _embedding(embedder)
        for i in range(0, len(messages), self.params.batch):
            chunk = messages[i:i + self.params.batch]
            mem.add([{"role": "user" if m.role == "user" else "assistant", "content": render(m)} for m in chunk],
                    user_id=user_id, metadata={"dkilab_ids": ",".join(m.message_id for m in chunk)})
        return mem

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang = language_of(question)
        with stages("memory"):
            mem = self.memory_for(memory, model)
            stats = self.stats_for(memory)
        with stages("recall", question=question):
            found = mem.search(question, filters={"user_id": memory.user_id}, top_k=self.params.top_k)["results"]
            lines = [_line(hit, memory.user_id, k) for k, hit in enumerate(found)]
        with stages("assembly"):
            head = preferences_text(preferences, lang)
            budget = self.budget(model, question, lang, head)
            kept, budget.used = first_that_fit(lines, model, budget.history, lang, self.fields)  # best first
            history = history_block(kept, lang, self.fields)
            user_text = question_text(question, lang, head + history)
        with stages("generation"):
            gen, prompt = self.generate(model, user_text, lang)
        sources = [i for m in kept for i in str(m.metadata.get("dkilab_ids") or "").split(",") if i]
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, generated_tokens=gen.new_tokens,
                      recalled_ids=list(dict.fromkeys(sources)), context_text=head + history, prompt=prompt,
                      budget=budget, metadata={"memories": len(found), "memories_shown": len(kept),
                                               "memories_stored": stats.get("stored"),
                                               "extraction_calls": stats.get("calls"),
                                               "extraction_failures": stats.get("failures")})


def _line(hit: dict, user_id: str, k: int) -> Message:
    """A mem0 memory as a history line: its text, dated when it was stored; the messages it came from kept."""
    when = hit.get("created_at") or datetime.now(timezone.utc).isoformat()
    meta = hit.get("metadata") or {}
    return Message(f"mem0:{hit.get('id', k)}", user_id, "mem0", k, "user", str(hit.get("memory", "")),
                   datetime.fromisoformat(when), metadata={"dkilab_ids": meta.get("dkilab_ids", "")})


def _llm(model, stats: dict[str, int]):
    """mem0's LLM interface over a dkilab ChatModel; each extraction reply is counted, and counted as failed when
    mem0's own reading of it (remove_code_blocks, then json or extract_json) finds no `memory` list."""
    from mem0.llms.base import LLMBase

    class ChatModelLLM(LLMBase):
        def __init__(self):
            super().__init__({})

        def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto", **kwargs):
            reply = model.generate(messages, max_new_tokens=EXTRACTION_TOKENS)
            if response_format == {"type": "json_object"}:
                stats["calls"] += 1
                stats["failures"] += not _parses(reply)
            return reply

    return ChatModelLLM()


def _parses(reply: str) -> bool:
    from mem0.memory.utils import extract_json, remove_code_blocks

    text = remove_code_blocks(reply)
    if not text.strip():
        return True  # an empty reply: nothing extracted, by mem0's own reading
    for candidate in (text, extract_json(text)):
        try:
            data = json.loads(candidate, strict=False)
        except ValueError:
            continue
        return isinstance(data, dict) and isinstance(data.get("memory", []), list)
    return False


def _embedding(embedder):
    """mem0's embedding interface over a dkilab Embedder (queries and memories encoded alike, as mem0 does)."""
    from mem0.embeddings.base import EmbeddingBase

    class DkilabEmbedding(EmbeddingBase):
        def __init__(self):
            super().__init__(None)

        def embed(self, text, memory_action=None):
            return [float(x) for x in embedder.encode([text])[0]]

        def embed_batch(self, texts, memory_action="add"):
            return [[float(x) for x in v] for v in embedder.encode(list(texts))]

    return DkilabEmbedding()
