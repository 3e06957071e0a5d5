"""The recall service (seed recall-agent §3: "检索服务 + 工具装饰器注入 user_id"; history endpoints of
seed session-l1-l2-memory §7.2): the user-bound query tools over HTTP.

- The user comes from the API key (header `X-API-Key`, looked up in the keys file by hash), never from
  the request: no endpoint takes a user id. No key or an unknown key -> 401.
- Another user's message or session is answered exactly as a missing one: 404, same body, the same
  single query scoped to the caller (so the same timing class).
- Bad parameters -> 422 naming the field; bodies over 64 KiB -> 413; URLs over 4 KiB -> 414.
- One process per store: ranked lexical result sets (behind cursors) live in the process. The store
  calls that take about a millisecond run on the event loop (no thread hop); semantic search, whose query
  encoding can take 10 ms and releases the GIL, runs in the thread pool.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field

from dkilab.memory.sessions import SessionNotFoundError
from dkilab.memory.view import MAX_QUERY_CHARS, MessageNotFoundError
from dkilab.service.keys import API_KEY_HEADER, KeyRing
from dkilab.types import Message, Page

MAX_BODY = 64 * 1024
MAX_URL = 4096
_api_key = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, description="a key from the service's keys file")


# --- request bodies (extra keys refused, so a typo is a 422 naming it, not silently ignored) ------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Filter(_Body):
    role: str | None = Field(None, min_length=1, max_length=64)
    session_id: str | None = Field(None, min_length=1, max_length=512)
    time_range: dict[str, datetime | None] | None = Field(None, description="{since, until}: ISO 8601")
    metadata: dict[str, str | int | list[str | int]] | None = None


class MessagesListBody(_Body):
    since: datetime | None = None
    until: datetime | None = None
    role: str | None = Field(None, min_length=1, max_length=64)
    page_size: int = Field(50, ge=1, le=1000)
    cursor: str | None = Field(None, max_length=2048)


class LexicalBody(_Body):
    query_text: str = Field(max_length=MAX_QUERY_CHARS)
    filter: Filter | None = None
    page_size: int = Field(20, ge=1, le=200)
    cursor: str | None = Field(None, max_length=2048)


class SemanticBody(_Body):
    query_text: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    query_embedding: list[float] | None = Field(None, max_length=4096)
    filter: Filter | None = None
    top_k: int = Field(10, ge=1, le=1000)
    min_score: float | None = Field(None, ge=-1.0, le=1.0)


class NeighborsBody(_Body):
    message_id: str = Field(min_length=1, max_length=512)
    before: int = Field(5, ge=0, le=1000)
    after: int = Field(5, ge=0, le=1000)


class GetBody(_Body):
    message_id: str = Field(min_length=1, max_length=512)


# --- responses ------------------------------------------------------------------------------------
def message_json(m: Message) -> dict[str, Any]:
    """A message without its user id (the caller's own, by construction)."""
    return {"message_id": m.message_id, "session_id": m.session_id, "turn_id": m.turn_id, "role": m.role,
            "content": m.content, "timestamp": m.timestamp.isoformat(), "topic": m.topic, "speaker": m.speaker,
            "metadata": m.metadata}


def page_json(page: Page) -> dict[str, Any]:
    return {"items": [{"message": message_json(h.message), "score": h.score} for h in page.items],
            "next_cursor": page.next_cursor}


def _json(obj: Any) -> Response:
    """JSON straight from the standard library: FastAPI's jsonable_encoder cost more than the search."""
    return Response(json.dumps(obj, ensure_ascii=False, default=str), media_type="application/json")


def _unprocessable(exc: Exception, fields: tuple[str, ...]) -> HTTPException:
    """A ValueError of the memory view as a 422 that names the field its message starts with."""
    text = str(exc)
    field = next((f for f in fields if text.startswith(f) or text.startswith(f"invalid {f}")), None)
    if field is None and "cursor" in text:
        field = "cursor"
    return HTTPException(422, [{"loc": ["body", field] if field else ["body"], "msg": text, "type": "value_error"}])


class _Limits:
    """Pure ASGI middleware (no per-request task like BaseHTTPMiddleware): URL and body size limits."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_URL:
            return await JSONResponse({"detail": f"URL longer than {MAX_URL} bytes"}, 414)(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return await JSONResponse({"detail": f"body larger than {MAX_BODY} bytes"}, 413)(scope, receive, send)
        if length is None and scope.get("method") in ("POST", "PUT", "PATCH"):
            # chunked upload (no length): read it whole first, up to the limit, then hand it on
            body, more = b"", True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > MAX_BODY:
                    return await JSONResponse({"detail": f"body larger than {MAX_BODY} bytes"}, 413)(scope, receive, send)
            replayed = False

            async def replay():
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            return await self.app(scope, replay, send)
        await self.app(scope, receive, send)


def create_app(store, keys: KeyRing, manager=None) -> FastAPI:  # noqa: C901 - one closure per endpoint
    """The service over an open MemoryStore and a KeyRing (`manager`: a MemoryManager for the history
    endpoints; one over the store's SQLite by default)."""
    from dkilab.memory import MemoryManager

    manager = manager or MemoryManager(store)
    from fastapi_offline import FastAPIOffline  # /docs and /redoc with bundled assets: no CDN (offline machines)

    app = FastAPIOffline(title="dkilab recall service", version="1",
                  description="User-bound query tools (seed recall-agent §3) and session history (seed "
                              "session-l1-l2-memory §7.2). The user is the one the API key belongs to; no "
                              "endpoint takes a user id. Another user's message or session is a 404, exactly "
                              "as a missing one.")
    app.add_middleware(_Limits)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each field, without echoing the input (it may not even be encodable: a lone surrogate)."""
        return JSONResponse({"detail": [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                                        for e in exc.errors()]}, 422)

    async def user(key: str | None = Security(_api_key)) -> str:
        uid = keys.user_for(key)
        if uid is None:
            raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": API_KEY_HEADER})
        return uid

    async def memory(uid: str = Depends(user)):
        return store.for_user(uid)

    @app.get("/health", tags=["service"], summary="liveness (no key needed)")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/v1/whoami", tags=["service"], summary="the user this key is bound to")
    def whoami(uid: str = Depends(user)) -> dict[str, str]:
        return {"user_id": uid}

    @app.post("/v1/get", tags=["query tools"], summary="one message by id (404 if not the caller's)")
    async def get(body: GetBody, mem=Depends(memory)):
        try:
            return _json(message_json(mem.get(body.message_id)))
        except MessageNotFoundError:
            raise HTTPException(404, "message not found") from None

    @app.post("/v1/messages_list", tags=["query tools"], summary="messages in time order, cursor-paged")
    async def messages_list(body: MessagesListBody, mem=Depends(memory)):
        try:
            return _json(page_json(mem.messages_list(body.since, body.until, body.role, body.page_size, body.cursor)))
        except (ValueError, TypeError) as e:
            raise _unprocessable(e, ("since", "until", "role", "page_size", "cursor")) from None

    @app.post("/v1/lexical_search", tags=["query tools"], summary="BM25 keyword search, cursor-paged")
    async def lexical_search(body: LexicalBody, mem=Depends(memory)):
        try:
            f = body.filter.model_dump(exclude_none=True) if body.filter else None
            return _json(page_json(mem.lexical_search(body.query_text, f, body.page_size, body.cursor)))
        except (ValueError, TypeError) as e:
            raise _unprocessable(e, ("query_text", "filter", "page_size", "cursor")) from None

    @app.post("/v1/semantic_search", tags=["query tools"], summary="vector search (text or a unit embedding)")
    def semantic_search(body: SemanticBody, mem=Depends(memory)):
        try:
            f = body.filter.model_dump(exclude_none=True) if body.filter else None
            return _json(page_json(mem.semantic_search(body.query_text, body.query_embedding, f, body.top_k,
                                                       body.min_score)))
        except (ValueError, TypeError) as e:
            raise _unprocessable(e, ("query_text", "query_embedding", "filter", "top_k", "min_score")) from None

    @app.post("/v1/neighbors", tags=["query tools"], summary="a message with its neighbours in its session")
    async def neighbors(body: NeighborsBody, mem=Depends(memory)):
        try:
            return _json([message_json(m) for m in mem.neighbors(body.message_id, body.before, body.after)])
        except MessageNotFoundError:
            raise HTTPException(404, "message not found") from None

    @app.get("/v1/sessions/{session_id}/messages", tags=["query tools"],
             summary="every message of one of the caller's sessions (empty for any other)")
    async def session_messages(session_id: str, mem=Depends(memory)):
        return _json([message_json(m) for m in mem.session_messages(session_id[:512])])

    @app.get("/v1/recent", tags=["query tools"], summary="the latest n messages, oldest first")
    async def recent(n: int = Query(10, ge=0, le=10_000), session_id: str | None = Query(None, max_length=512),
               mem=Depends(memory)):
        return _json([message_json(m) for m in mem.recent(n, session_id)])

    @app.get("/v1/speakers", tags=["query tools"], summary="role -> speaker names in the caller's messages")
    async def speakers(mem=Depends(memory)):
        return _json({role: sorted(names) for role, names in mem.speakers().items()})

    @app.get("/api/session-list", tags=["history"], summary="the caller's sessions, newest first (§7.2)")
    def session_list(limit: int = Query(50, ge=1, le=1000), uid: str = Depends(user)):
        return manager.for_user(uid).list_session_records(limit)

    @app.get("/api/conversation-history", tags=["history"], summary="one session's turns in order (§7.2)")
    def conversation_history(session_id: str = Query(min_length=1, max_length=512),
                             limit: int = Query(50, ge=1, le=10_000), uid: str = Depends(user)):
        try:
            return manager.for_user(uid).get_conversation_history(session_id, limit)
        except SessionNotFoundError:
            raise HTTPException(404, "session not found") from None

    return app
