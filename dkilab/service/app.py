"""The recall service (seed recall-agent §3: "检索服务 + 工具装饰器注入 user_id"; history endpoints of
seed session-l1-l2-memory §7.2): the user-bound query tools over HTTP.

- The user comes from the API key (header `X-API-Key`, looked up in the keys file by hash), never from
  the request: no endpoint takes a user id. No key or an unknown key -> 401.
- Another user's message or session is answered exactly as a missing one: 404, same body, the same
  single query scoped to the caller (so the same timing class).
- Bad parameters -> 422 naming the field; bodies over 64 KiB -> 413; URLs over 4 KiB -> 414; a body
  not received within `body_timeout` s -> 408 (a stalled client holds no connection for long).
- One tenant cannot stall another: every store call that can be large (and the JSON of its answer) runs
  in a thread pool, never on the event loop; only calls bounded to about a millisecond (`get`, pages of
  at most 50, lexical queries of at most 200 characters) run on the loop, where a thread hop would cost
  more than the call; each key has at most `per_key` requests running (more wait on the event loop,
  holding no thread, and get 429 after `queue_wait` s); a request still running after `request_timeout`
  s is answered 503 (its thread finishes in the background, still counted against its key).
- One process per store: ranked lexical result sets (behind cursors) live in the process.
"""
from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Callable

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field

from dkilab.memory import MemoryManager
from dkilab.memory.sessions import SessionNotFoundError
from dkilab.memory.view import MAX_QUERY_CHARS, MessageNotFoundError
from dkilab.service.keys import API_KEY_HEADER, KeyRing
from dkilab.types import Message, Page

MAX_BODY = 64 * 1024
MAX_URL = 4096
BODY_TIMEOUT = 10.0  # seconds to receive a whole request body
LIGHT_PAGE, LIGHT_QUERY = 50, 200  # calls this small (about a millisecond) run on the loop: a thread hop costs more
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
    """Pure ASGI middleware (no per-request task like BaseHTTPMiddleware): URL and body size limits, and
    the whole body read (up to the limit, within `body_timeout` s) before the app sees the request."""

    def __init__(self, app, body_timeout: float = BODY_TIMEOUT):
        self.app, self.body_timeout = app, body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_URL:
            return await JSONResponse({"detail": f"URL longer than {MAX_URL} bytes"}, 414)(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return await JSONResponse({"detail": f"body larger than {MAX_BODY} bytes"}, 413)(scope, receive, send)
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        body, more = b"", True
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except asyncio.TimeoutError:
                return await JSONResponse({"detail": f"request body not received within {self.body_timeout:g} s"}, 408,
                                          headers={"Connection": "close"})(scope, receive, send)
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

        await self.app(scope, replay, send)


class Gate:
    """Store work off the event loop, at most `per_key` requests of one key running at a time, and a total
    time per request (see the module docstring)."""

    def __init__(self, per_key: int = 2, queue_wait: float = 10.0, request_timeout: float = 30.0, workers: int = 16):
        if per_key < 1 or workers < 1 or queue_wait <= 0 or request_timeout <= 0:
            raise ValueError(f"per_key and workers >= 1, timeouts > 0 expected, got {per_key}, {workers}, "
                             f"{queue_wait}, {request_timeout}")
        self.per_key, self.queue_wait, self.request_timeout = per_key, queue_wait, request_timeout
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dkilab-serve")
        self._slots: dict[str, asyncio.Semaphore] = {}

    async def run(self, key: str, fn: Callable[[], Any], light: bool = False) -> Any:
        """`fn()` under the key's limit: in the pool, or (`light`: a call bounded to about a millisecond,
        such as `get` or a 20-hit page) on the loop, where a thread hop would cost more than the call."""
        slots = self._slots.get(key) or self._slots.setdefault(key, asyncio.Semaphore(self.per_key))
        try:
            await asyncio.wait_for(slots.acquire(), self.queue_wait)
        except asyncio.TimeoutError:
            raise HTTPException(429, f"this key already has {self.per_key} requests running; waited "
                                     f"{self.queue_wait:g} s", headers={"Retry-After": "1"}) from None
        if light:
            try:
                return fn()
            finally:
                slots.release()
        future = asyncio.get_running_loop().run_in_executor(self.pool, fn)
        future.add_done_callback(lambda _: slots.release())  # released when the work ends, not when we stop waiting
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.request_timeout)
        except asyncio.TimeoutError:
            raise HTTPException(503, f"the request took longer than {self.request_timeout:g} s",
                                headers={"Retry-After": "5"}) from None


def create_app(store, keys: KeyRing, manager=None, gate: Gate | None = None,
               body_timeout: float = BODY_TIMEOUT) -> FastAPI:  # noqa: C901 - one closure per endpoint
    """The service over an open MemoryStore and a KeyRing (`manager`: a MemoryManager for the history
    endpoints; one over the store's SQLite by default; `gate`: per-key limits and timeouts)."""
    manager = manager or MemoryManager(store)
    gate = gate or Gate()
    from fastapi_offline import FastAPIOffline  # /docs and /redoc with bundled assets: no CDN (offline machines)

    app = FastAPIOffline(title="dkilab recall service", version="1",
                  description="User-bound query tools (seed recall-agent §3) and session history (seed "
                              "session-l1-l2-memory §7.2). The user is the one the API key belongs to; no "
                              "endpoint takes a user id. Another user's message or session is a 404, exactly "
                              "as a missing one.")
    app.add_middleware(_Limits, body_timeout=body_timeout)
    app.state.gate = gate

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each field, without echoing the input (it may not even be encodable: a lone surrogate)."""
        return JSONResponse({"detail": [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                                         "type": e.get("type", "")}
                                        for e in exc.errors()]}, 422)

    async def user(key: str | None = Security(_api_key)) -> str:
        uid = keys.user_for(key)
        if uid is None:
            raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": API_KEY_HEADER})
        return uid

    def run(uid: str, fn: Callable[[Any], Any], light: bool = False):
        """`fn(the user's memory view)` under the key's limit, in the gate's pool unless `light`."""
        return gate.run(uid, lambda: fn(store.for_user(uid)), light)

    @app.get("/health", tags=["service"], summary="liveness (no key needed)")
    async def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/v1/whoami", tags=["service"], summary="the user this key is bound to, and the store's encoder")
    async def whoami(uid: str = Depends(user)) -> dict[str, str]:
        # the encoder: learned fusion over the service picks the model part of the store's encoder
        return {"user_id": uid, "encoder": store.embedder.model_name}

    @app.post("/v1/get", tags=["query tools"], summary="one message by id (404 if not the caller's)")
    async def get(body: GetBody, uid: str = Depends(user)):
        def work(mem):
            try:
                return _json(message_json(mem.get(body.message_id)))
            except MessageNotFoundError:
                raise HTTPException(404, "message not found") from None
        return await run(uid, work, light=True)

    @app.post("/v1/messages_list", tags=["query tools"], summary="messages in time order, cursor-paged")
    async def messages_list(body: MessagesListBody, uid: str = Depends(user)):
        def work(mem):
            try:
                return _json(
                    page_json(mem.messages_list(body.since, body.until, body.role, body.page_size, body.cursor)))
            except (ValueError, TypeError) as e:
                raise _unprocessable(e, ("since", "until", "role", "page_size", "cursor")) from None
        return await run(uid, work, light=body.page_size <= LIGHT_PAGE)

    @app.post("/v1/lexical_search", tags=["query tools"], summary="BM25 keyword search, cursor-paged")
    async def lexical_search(body: LexicalBody, uid: str = Depends(user)):
        def work(mem):
            try:
                f = body.filter.model_dump(exclude_none=True) if body.filter else None
                return _json(page_json(mem.lexical_search(body.query_text, f, body.page_size, body.cursor)))
            except (ValueError, TypeError) as e:
                raise _unprocessable(e, ("query_text", "filter", "page_size", "cursor")) from None
        return await run(uid, work, light=body.page_size <= LIGHT_PAGE and len(body.query_text) <= LIGHT_QUERY)

    @app.post("/v1/semantic_search", tags=["query tools"], summary="vector search (text or a unit embedding)")
    async def semantic_search(body: SemanticBody, uid: str = Depends(user)):
        def work(mem):
            try:
                f = body.filter.model_dump(exclude_none=True) if body.filter else None
                return _json(page_json(mem.semantic_search(body.query_text, body.query_embedding, f, body.top_k,
                                                           body.min_score)))
            except (ValueError, TypeError) as e:
                raise _unprocessable(e, ("query_text", "query_embedding", "filter", "top_k", "min_score")) from None
        return await run(uid, work)

    @app.post("/v1/neighbors", tags=["query tools"], summary="a message with its neighbours in its session")
    async def neighbors(body: NeighborsBody, uid: str = Depends(user)):
        def work(mem):
            try:
                return _json([message_json(m) for m in mem.neighbors(body.message_id, body.before, body.after)])
            except MessageNotFoundError:
                raise HTTPException(404, "message not found") from None
        return await run(uid, work, light=body.before + body.after <= LIGHT_PAGE)

    @app.get("/v1/sessions/{session_id}/messages", tags=["query tools"],
             summary="every message of one of the caller's sessions (empty for any other)")
    async def session_messages(session_id: str, uid: str = Depends(user)):
        return await run(uid, lambda mem: _json([message_json(m) for m in mem.session_messages(session_id[:512])]))

    @app.get("/v1/recent", tags=["query tools"], summary="the latest n messages, oldest first")
    async def recent(n: int = Query(10, ge=0, le=10_000), session_id: str | None = Query(None, max_length=512),
                     uid: str = Depends(user)):
        return await run(uid, lambda mem: _json([message_json(m) for m in mem.recent(n, session_id)]))

    @app.get("/v1/count", tags=["query tools"], summary="how many messages the caller has")
    async def count(uid: str = Depends(user)):
        return await run(uid, lambda mem: {"count": mem.count()}, light=True)

    @app.get("/v1/speakers", tags=["query tools"], summary="role -> speaker names in the caller's messages")
    async def speakers(uid: str = Depends(user)):
        return await run(uid, lambda mem: _json({role: sorted(names) for role, names in mem.speakers().items()}))

    @app.get("/api/session-list", tags=["history"], summary="the caller's sessions, newest first (§7.2)")
    async def session_list(limit: int = Query(50, ge=1, le=1000), uid: str = Depends(user)):
        return await run(uid, lambda _: _json(manager.for_user(uid).list_session_records(limit)))

    @app.get("/api/conversation-history", tags=["history"], summary="one session's turns in order (§7.2)")
    async def conversation_history(session_id: str = Query(min_length=1, max_length=512),
                                   limit: int = Query(50, ge=1, le=10_000), uid: str = Depends(user)):
        def work(_):
            try:
                return _json(manager.for_user(uid).get_conversation_history(session_id, limit))
            except SessionNotFoundError:
                raise HTTPException(404, "session not found") from None
        return await run(uid, work)

    return app
