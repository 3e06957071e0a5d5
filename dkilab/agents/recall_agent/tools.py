"""The four user-bound query tools as the agent calls them (seed recall-agent §3): arguments validated,
every call traced as a span (tool, arguments, hits), results as (message, score) pairs."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dkilab.agents.recall_agent.steps import ToolCall
from dkilab.config import describe_errors
from dkilab.memory.view import QueryFilter
from dkilab.tracing import span
from dkilab.types import Message

TOOLS = ("messages_list", "lexical_search", "semantic_search", "neighbors")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessagesListArgs(_Args):
    since: datetime | None = None
    until: datetime | None = None
    role: Literal["user", "assistant", "system"] | None = None
    page_size: int = Field(50, ge=1, le=1000)
    cursor: str | None = None


class LexicalArgs(_Args):
    query_text: str = Field(min_length=1)
    filter: QueryFilter | None = None
    page_size: int = Field(20, ge=1, le=200)
    cursor: str | None = None


class SemanticArgs(_Args):
    query_text: str = Field(min_length=1)
    filter: QueryFilter | None = None
    top_k: int = Field(10, ge=1, le=1000)
    min_score: float | None = None


class NeighborsArgs(_Args):
    message_id: str = Field(min_length=1)
    before: int = Field(5, ge=0, le=50)
    after: int = Field(5, ge=0, le=50)


ARGS: dict[str, type[BaseModel]] = {"messages_list": MessagesListArgs, "lexical_search": LexicalArgs,
                                    "semantic_search": SemanticArgs,
        "neighbors": NeighborsArgs}
SIGNATURES = {
    "messages_list": "messages_list(since, until, role, page_size, cursor) - messages in time order",
    "lexical_search": 'lexical_search(query_text, filter{role, time_range{since, until}}, page_size, cursor) - '
                      'keywords; "quoted" = phrase',
    "semantic_search": "semantic_search(query_text, filter{role, time_range{since, until}}, top_k, min_score) - by "
                       "meaning",
    "neighbors": "neighbors(message_id, before, after) - the messages around one message",
}


def validate_call(name: str, args: dict) -> dict:
    """The call's arguments, validated (ValueError naming the tool and field otherwise)."""
    if name not in ARGS:
        raise ValueError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    try:
        return ARGS[name].model_validate(args).model_dump(exclude_none=True)
    except ValidationError as exc:
        raise ValueError(f"{name}: {describe_errors(exc)}") from None


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items() if v is not None}
    return x.isoformat() if isinstance(x, datetime) else x


def run_tool(memory, call: ToolCall) -> tuple[list[tuple[Message, float]], str | None]:
    """Execute one call on the user-bound memory -> ([(message, score)], next cursor)."""
    args = validate_call(call.tool, call.args)
    with span(f"tool.{call.tool}", **_jsonable(args)) as out:
        if call.tool == "neighbors":
            hits, cursor = [(m, 0.0) for m in memory.neighbors(**args)], None
        else:
            tool = {"messages_list": memory.messages_list, "lexical_search": memory.lexical_search,
                    "semantic_search": memory.semantic_search}[call.tool]
            page = tool(**args)
            hits, cursor = [(h.message, float(h.score or 0.0)) for h in page.items], page.next_cursor
        out.update(hits=[{"id": m.message_id, "role": m.role, "score": round(s, 4), "text": m.content[:200]}
                         for m, s in hits], next_cursor=bool(cursor))
    return hits, cursor
