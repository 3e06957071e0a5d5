"""`scripted:oracle`: the persona that reads perfectly what a strategy shows it. It gives
every strategy an answer-level upper bound on full data, on CPU, without a language model.

Before each question the runner tells it the gold (`expect`: the answer and the evidence messages).
Then, on each generation, from the prompt, the tool results and the K/V memory texts it is given:
- every evidence message shown verbatim, or fetched whole by fact calls (every page of it in the input:
  `has_more=true` on the last page shown is a part), or, for an item of a session-level dataset (one item a
  session, `granularity: session`), every sentence of its evidence turns in the input (a fact call pages a long
  item by sentence) -> it answers the gold answer;
- else, when a summary's trace id (`[SUMMARY trace_id="..."]`) is an evidence message not yet
  fetched whole and it may still call -> `retrieve_fact` on it, from the first record it has not read
  (the `<tool_call>` JSON when tools are offered, the generic call otherwise);
- else (no evidence shown, an unanswerable question, no evidence ids in the data) -> the abstention
  phrase the prompts ask for.
It reads a K/V memory as the text it encodes, so K/V strategies run on it too. Its runs are tagged as
scripted runs: they test strategies, not models.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass

from dkilab.models.text_only import TextOnlyModel
from dkilab.prompts import ABSTAIN_PHRASE, FINAL, NATIVE_CALL
from dkilab.text.lang import detect_language
from dkilab.text.summarize import split_sentences
from dkilab.tracing import traced_generation
from dkilab.types import Conversation, Generation, MemoryBlock, QAItem

SPEC = "scripted:oracle"
# part of its cells' identity (2: a message fetched in part is not read; it pages on; 3: an item of a session-level
# dataset is read once its evidence turns' lines are in the input)
VERSION = "3"
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Gold:
    question: str
    answer: str | None  # None: abstain (unanswerable)
    evidence: dict[str, str]  # trace id -> the message text
    lines: dict[str, list[str]] | None = None  # trace id -> the evidence turns' lines in it (session-level data)


_SEGMENT = re.compile(r'\[FACT_SEGMENT trace_id="([^"]+)"([^\]]*)\]\n?(.*?)'
                      r'(?=\[/FACT_SEGMENT\]|\[FACT_SEGMENT|\Z)', re.S)


def _attr(attrs: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=(\w+)", attrs)
    return m.group(1) if m else None


def fetched(seen: str) -> dict[str, int | None]:
    """trace id -> the first record of it no page shown covers (None once every page is shown): a message
    fetched in pages counts as read only when all of them reached the input, not at its first header. A
    segment that gives no `total` counts as the whole message."""
    covered: dict[str, set[int]] = {}
    totals: dict[str, int | None] = {}
    for trace_id, attrs, body in _SEGMENT.findall(seen):
        total, offset = _attr(attrs, "total"), int(_attr(attrs, "offset") or 0)
        n = len([line for line in body.splitlines() if line.strip()])
        totals[trace_id] = None if total is None or totals.get(trace_id, 0) is None else int(total)
        covered.setdefault(trace_id, set()).update(range(offset, offset + n))
    return {i: None if t is None else next((k for k in range(t) if k not in covered[i]), None)
            for i, t in totals.items()}


class OracleModel(TextOnlyModel):
    supports_kv = True  # a K/V memory is read as the text it encodes
    reads_memory_text = True
    model = None  # no weights: nothing to check or switch

    def __init__(self, max_context: int | None = None):
        super().__init__(SPEC, max_context)
        self.concurrency = 1
        self._local = threading.local()  # the question this thread is answering

    def __repr__(self) -> str:
        return "OracleModel()"

    def expect(self, item: QAItem, conv: Conversation) -> None:
        """The gold of the question about to be asked on this thread (the runner calls it)."""
        by_id = {m.message_id: m.content for m in conv.messages} if item.evidence_ids else {}
        answer = item.answer if item.answerable and item.answer not in (None, "") else None
        lines = item.metadata.get("evidence_lines")
        self._local.gold = Gold(item.question, None if answer is None else str(answer),
                                {i: by_id[i] for i in item.evidence_ids if i in by_id},
                                {i: list(v) for i, v in lines.items()} if isinstance(lines, dict) else None)

    def output_for(self, messages: list[dict], memories=None, tools=None) -> str:
        gold: Gold | None = getattr(self._local, "gold", None)
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        if gold is None or gold.question not in user:
            raise RuntimeError("scripted:oracle was not told the gold of this question (the runner calls "
                               "OracleModel.expect before each question)")
        lang = detect_language(gold.question)
        abstain = ABSTAIN_PHRASE[lang]
        if gold.answer is None or not gold.evidence:
            return abstain
        seen = "\n".join([str(m.get("content") or "") for m in messages]
                         + [kv.text for kv, alpha in (memories or []) if alpha > 0 and isinstance(kv, MemoryBlock)])
        flat = _SPACE.sub(" ", seen)
        pages = fetched(seen)
        missing = [i for i, text in gold.evidence.items()
                   if _SPACE.sub(" ", text).strip() not in flat and not (i in pages and pages[i] is None)
                   and not (gold.lines and gold.lines.get(i) and all(_SPACE.sub(" ", s).strip() in flat
                                                                      for ln in gold.lines[i]
                                                                      for s in split_sentences(ln)))]
        if not missing:
            return gold.answer
        native = bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages) or any(
            p.split("{")[0] in seen for p in NATIVE_CALL.values())
        may_call = bool(tools) if native else "retrieve_fact" in seen and not any(f in user for f in FINAL.values())
        summarised = [i for i in missing if f'[SUMMARY trace_id="{i}"' in seen]
        if not (may_call and summarised):
            return abstain
        first = summarised[0]  # a message fetched in part: the next page it has not read
        offset = pages.get(first) or 0
        args = {"trace_id": first, "offset": offset, "limit": 50}
        if tools:
            return "<tool_call>" + json.dumps({"name": "retrieve_fact", "arguments": args}) + "</tool_call>"
        return f'retrieve_fact(trace_id="{first}", offset={offset}, limit=50)'

    @traced_generation
    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation:
        msgs = ([{"role": "user", "content": messages_or_prompt}] if isinstance(messages_or_prompt, str)
                else messages_or_prompt)
        prompt = self.render(messages_or_prompt, tools)
        text = self.truncate(self.output_for(msgs, memories, tools), max_new_tokens)
        injected = 1 + sum(kv.n_tokens for kv, alpha in memories if alpha > 0) if memories else 0
        return Generation(text, self.count_tokens(prompt), self.count_tokens(text), injected)
