"""The prompt formatter's interface (seed recall-v4 §4.5: history items, the trust-and-reasoning constraint of §2.4,
fact segments, fact-call detection in model output) and `FORMATTERS`, which discovers the formatters of this package:
one module each (`generic`, `deepseek`, `glm`, `native`)."""
from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any, Literal

from dkilab.models.tool_calls import MalformedToolCall, parse_tool_calls
from dkilab.prompts import CONSTRAINT, FINAL, FOLLOW_UP, NOT_FOUND, QUERY  # prompt texts: dkilab/prompts.py
from dkilab.registry import Registry
from dkilab.text.history import DEFAULT_FIELDS, render_line, role_name, when
from dkilab.text.history import ROLE_NAME as ROLE
from dkilab.types import FactRequest, FactResponse, HistoryItem

_QUOTES = "\"'“”‘’「」`"
_INT = re.compile(r"^\s*(-?\d{1,9})\s*$")  # more digits than an offset can use: malformed, never int() of 5,000 digits
MAX_CALL_ARGS = 2000  # characters between "retrieve_fact(" and ")"; a longer argument list is malformed
MAX_OFFSET, MAX_LIMIT = 1_000_000, 1000


def _split_args(args: str) -> list[str]:
    """Split on commas outside quotes, in one pass."""
    parts, buf, quote = [], [], None
    closing = {"“": "”", "‘": "’", "「": "」"}
    for ch in args:
        if quote is not None:
            buf.append(ch)
            if ch == quote:
                quote = None
        elif ch in _QUOTES:
            buf.append(ch)
            quote = closing.get(ch, ch)
        elif ch == ",":
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    return [p for p in parts if p.strip()]


def _lang(language: str) -> str:
    if language not in ROLE:
        raise ValueError(f"language must be 'cn' or 'en', got {language!r}")
    return language


class PromptFormatter(ABC):
    """Base formatter. Subclasses change the fact-call syntax; the history layout is shared.

    `malformed_calls` counts outputs that tried to call retrieve_fact but could not be parsed.
    """

    name = "base"
    matches: tuple[str, ...] = ()  # model-name fragments that select this formatter under `auto`

    def __init__(self, language: str = "cn", default_limit: int = 5, fields=DEFAULT_FIELDS):
        self.language = _lang(language)
        self.default_limit = default_limit  # `limit` of a call that gives none (fact_call.batch_size)
        self.fields = tuple(fields)  # what a history line carries besides the text (dkilab.text.history)
        self.malformed_calls = 0

    def templates(self, language: str | None = None) -> dict[str, str]:
        """Every fixed text this formatter puts in a prompt (logged with each experiment cell)."""
        lang = _lang(language or self.language)
        out = {"constraint": self.format_constraint_instruction(["<trace_id>"], lang), "query": QUERY[lang],
               "follow_up": FOLLOW_UP[lang], "final": FINAL[lang], "not_found": NOT_FOUND[lang]}
        system = self.system_prompt(lang)
        return out | ({"system": system} if system else {})

    # --- history list -----------------------------------------------------------------------
    def format_summary_item(self, item: HistoryItem, language: str | None = None) -> str:
        """`[SUMMARY trace_id=... conf=... time="..." speaker="..."]`: the same time and speaker a verbatim
        line of that message shows (the role when speaker is not a field or not known)."""
        lang = _lang(language or self.language)
        lines = [f"- {line.lstrip('- ').strip()}" for line in item.content.splitlines() if line.strip()]
        head = f'[SUMMARY trace_id="{item.trace_id}" conf={item.confidence}'
        t = when(item.timestamp, self.fields)
        head += f' time="{t}"' if t else ""
        if "speaker" in self.fields and item.speaker:
            head += f' speaker="{item.speaker}"'
        elif role_name(item.role, lang):
            head += f" role={role_name(item.role, lang)}"
        return "\n".join([head + "]", *lines, "[/SUMMARY]"])

    def format_message_item(self, item: HistoryItem, language: str | None = None) -> str:
        return render_line(item.content, item.role, _lang(language or self.language), item.timestamp, item.speaker,
                           self.fields)

    def format_constraint_instruction(self, trace_ids: list[str], language: str | None = None) -> str:
        lang = _lang(language or self.language)
        example = trace_ids[0] if trace_ids else "..."
        call = self.format_fact_call(FactRequest(example, limit=self.default_limit), lang)
        return CONSTRAINT[lang].format(call=call)

    def format_query(self, query: str, language: str | None = None) -> str:
        return QUERY[_lang(language or self.language)].format(query=query)

    def follow_up(self, language: str | None = None) -> str:
        return FOLLOW_UP[_lang(language or self.language)]

    def final_instruction(self, language: str | None = None) -> str:
        """The last generation's line once the calls are spent: answer now, no other call."""
        return FINAL[_lang(language or self.language)]

    def system_prompt(self, language: str | None = None) -> str | None:
        """Extra system text some models need (tool registration); None for plain-text calls."""
        return None

    def format_fact_segment(self, response: FactResponse, language: str | None = None) -> str:
        lang = _lang(language or self.language)
        head = (f'[FACT_SEGMENT trace_id="{response.trace_id}" offset={response.offset} '
                f'total={response.total_count} has_more={str(response.has_more).lower()}]')
        if not response.found:
            body = [response.error or NOT_FOUND[lang].format(trace_id=response.trace_id)]
        else:  # each record as a history line: the time and speaker of the message it comes from
            body = [render_line(m["content"], m.get("role"), lang, _time(m.get("timestamp")), m.get("speaker"),
                                self.fields) for m in response.messages]
        return "\n".join([head, *body, "[/FACT_SEGMENT]"])

    # --- tool calls of agents (the same syntax, any tool) ---------------------------------------
    def format_tool_call(self, name: str, args: dict) -> str:
        """A call of tool `name` as this model writes it (generic: `name({"json": "args"})`)."""
        return f"{name}({json.dumps(args, ensure_ascii=False, default=str)})"

    def detect_tool_call(self, model_output: str, names) -> tuple[str, dict] | None:
        """(tool name, JSON arguments) of the first call of one of `names`, None if there is none or it is
        malformed (counted in `malformed_calls`)."""
        text = model_output or ""
        found = [(i, n) for n in names if (i := text.find(n)) >= 0]
        if not found:
            return None
        i, name = min(found)
        brace = text.find("{", i + len(name))
        if brace < 0 or text[i + len(name):brace].strip(" \t\n(:") != "":
            return self._malformed()
        try:
            args, _ = json.JSONDecoder().raw_decode(text[brace:])
        except json.JSONDecodeError:
            return self._malformed()
        return (name, args) if isinstance(args, dict) else self._malformed()

    # --- fact calls -------------------------------------------------------------------------
    @abstractmethod
    def format_fact_call(self, request: FactRequest, language: str | None = None) -> str:
        """The call as the model should write it (the formatter's own syntax)."""

    @abstractmethod
    def detect_fact_request(self, model_output: str) -> FactRequest | None:
        """The first fact call in the model's output, None if there is none or it is malformed."""

    # shared parsers -------------------------------------------------------------------------
    def _parse_text_call(self, output: str) -> FactRequest | None | Literal[False]:
        """retrieve_fact(...) in free text; False when no call is present at all."""
        m = re.search(r"retrieve_fact\s*\(", output)
        if not m:
            return False
        end = output.find(")", m.end())
        if end < 0:
            return self._malformed()
        args = output[m.end():end]
        if len(args) > MAX_CALL_ARGS:
            return self._malformed()
        trace_id = offset = limit = None
        positional = []
        for part in _split_args(args):
            if re.match(r"\s*\w+\s*[=:]", part):
                key, value = re.split(r"[=:]", part, maxsplit=1)
                key, value = key.strip().lower(), value.strip().strip(_QUOTES).strip()
                if key in ("trace_id", "traceid", "id"):
                    trace_id = value
                elif key == "offset" and _INT.match(value):
                    offset = int(value)
                elif key == "limit" and _INT.match(value):
                    limit = int(value)
                elif key in ("offset", "limit"):
                    return self._malformed()
            else:
                positional.append(part.strip().strip(_QUOTES).strip())
        if trace_id is None and positional:
            trace_id, positional = positional[0], positional[1:]
        for name, value in zip(("offset", "limit"), positional):
            if not _INT.match(value):
                return self._malformed()
            if name == "offset" and offset is None:
                offset = int(value)
            elif name == "limit" and limit is None:
                limit = int(value)
        return self._request(trace_id, offset, limit)

    def _parse_native(self, text: str) -> FactRequest | None | Literal[False]:
        """A retrieve_fact call in any family's native tool-call syntax; False when there is none."""
        try:
            calls = parse_tool_calls(text)
        except MalformedToolCall:
            return self._malformed()
        if not calls:
            return False
        call = next((c for c in calls if c.name == "retrieve_fact"), None)
        return self._malformed() if call is None else self._request_from_args(call.arguments)

    def _request_from_args(self, args) -> FactRequest | None:
        if not isinstance(args, dict):
            return self._malformed()
        off, lim = args.get("offset"), args.get("limit")
        if any(v is not None and (not isinstance(v, int) or isinstance(v, bool)) for v in (off, lim)):
            return self._malformed()  # JSON true is not an offset
        return self._request(args.get("trace_id"), off, lim)

    def _request(self, trace_id, offset, limit) -> FactRequest | None:
        if not trace_id or not isinstance(trace_id, str) or trace_id in ("...", "…"):
            return self._malformed()
        offset = 0 if offset is None else offset
        limit = self.default_limit if limit is None else limit
        if not 0 <= offset <= MAX_OFFSET or not 1 <= limit <= MAX_LIMIT:
            return self._malformed()
        return FactRequest(trace_id=trace_id.strip(), offset=offset, limit=limit)

    def _malformed(self) -> Any:
        """Count a malformed call; returns None (typed Any so every parser can `return self._malformed()`)."""
        self.malformed_calls += 1
        return None


FORMATTERS: Registry[type[PromptFormatter]] = Registry("prompt formatter", subclass_of=PromptFormatter,
                                                     discover="dkilab.recall.formatters")


def _time(value) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        return None


def formatter_kind(model_name: str = "", kind: str = "auto") -> str:
    """The registered formatter for a model: `kind`, or with `auto` the first formatter whose `matches`
    names occur in the model name (seed §4.5: deepseek -> DeepSeek, glm/chatglm -> GLM), else generic."""
    if kind != "auto":
        FORMATTERS[kind]  # the error for an unknown kind
        return kind
    name = (model_name or "").lower()
    return next((k for k, cls in FORMATTERS.items() if any(m in name for m in cls.matches)), "generic")


def create_formatter(model_name: str = "", language: str = "cn", kind: str = "auto",
                     default_limit: int = 5, fields=DEFAULT_FIELDS) -> PromptFormatter:
    return FORMATTERS[formatter_kind(model_name, kind)](language=language, default_limit=default_limit, fields=fields)
