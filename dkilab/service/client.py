"""`Client`: one user's memory over the recall service, with the same methods and return types as the
in-process view (`MemoryStore.for_user(...)`: `Page`, `Hit`, `Message`), so the recall agent, the
strategies and the fact retriever run on it unchanged.

    from dkilab.service import Client
    memory = Client("http://127.0.0.1:8765", api_key="dk_...")
    RecallAgent(memory).recall("你记得我有什么饮食偏好吗？")

Errors are the in-process ones: a 404 -> MessageNotFoundError, a 422 -> ValueError with the server's
message, a 401 -> PermissionError; a server that cannot be reached -> ConnectionError naming the URL.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import numpy as np

from dkilab.memory.sessions import SessionNotFoundError
from dkilab.memory.view import MessageNotFoundError
from dkilab.service.keys import API_KEY_HEADER
from dkilab.types import Hit, Message, Page


class ServiceError(RuntimeError):
    """The service answered with an error this client has no in-process equivalent for."""


class Client:
    def __init__(self, url: str, api_key: str, timeout: float = 30.0):
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers={API_KEY_HEADER: api_key}, timeout=timeout)
        self._user_id: str | None = None
        self._encoder: str | None = None  # the server store's encoder ("" from a server that does not say)
        self.embedder = None  # the server encodes query text (recall passes text, not vectors)

    def __repr__(self) -> str:
        return f"Client({self.url!r}, user={self._user_id!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transport --------------------------------------------------------------------------------
    def _call(self, method: str, path: str, json: dict | None = None, params: dict | None = None,
              message_id: str | None = None) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, json=json, params=params)
        except httpx.TransportError as e:
            raise ConnectionError(f"recall service at {self.url} cannot be reached ({type(e).__name__}: {e})") from e
        if r.status_code == 200:
            return r.json()
        detail = _detail(r)
        if r.status_code == 404 and message_id is not None:
            raise MessageNotFoundError(message_id)
        if r.status_code == 401:
            raise PermissionError(f"recall service at {self.url}: {detail}")
        if r.status_code in (413, 414, 422):
            raise ValueError(detail)
        raise ServiceError(f"recall service at {self.url}: HTTP {r.status_code} on {path}: {detail}")

    @staticmethod
    def _message(d: dict, user_id: str) -> Message:
        return Message(d["message_id"], user_id, d["session_id"], d["turn_id"], d["role"], d["content"],
                       datetime.fromisoformat(d["timestamp"]), d.get("topic"), d.get("speaker"),
                       d.get("metadata") or {})

    def _page(self, d: dict) -> Page:
        return Page([Hit(self._message(h["message"], self.user_id), h["score"]) for h in d["items"]], d["next_cursor"])

    # --- the Memory protocol ----------------------------------------------------------------------
    @property
    def user_id(self) -> str:
        if self._user_id is None:
            self._whoami()
        assert self._user_id is not None
        return self._user_id

    @property
    def encoder_name(self) -> str | None:
        """The server store's sentence encoder (learned fusion picks its model part by it)."""
        if self._encoder is None:
            self._whoami()
        return self._encoder or None

    def _whoami(self) -> None:
        got = self._call("GET", "/v1/whoami")
        self._user_id, self._encoder = got["user_id"], got.get("encoder", "")

    def get(self, message_id: str) -> Message:
        return self._message(self._call("POST", "/v1/get", {"message_id": message_id}, message_id=message_id),
                             self.user_id)

    def messages_list(self, since=None, until=None, role: str | None = None, page_size: int = 50,
                      cursor: str | None = None) -> Page:
        body = {"since": _iso(since), "until": _iso(until), "role": role, "page_size": page_size, "cursor": cursor}
        return self._page(self._call("POST", "/v1/messages_list", body))

    def lexical_search(self, query_text: str, filter=None, page_size: int = 20, cursor: str | None = None) -> Page:
        body = {"query_text": query_text, "filter": _filter(filter), "page_size": page_size, "cursor": cursor}
        return self._page(self._call("POST", "/v1/lexical_search", body))

    def semantic_search(self, query_text: str | None = None, query_embedding=None, filter=None, top_k: int = 10,
                        min_score: float | None = None) -> Page:
        emb = None if query_embedding is None else [float(x) for x in _flat(query_embedding)]
        body = {"query_text": query_text, "query_embedding": emb, "filter": _filter(filter), "top_k": top_k,
                "min_score": min_score}
        return self._page(self._call("POST", "/v1/semantic_search", body))

    def neighbors(self, message_id: str, before: int = 5, after: int = 5) -> list[Message]:
        out = self._call("POST", "/v1/neighbors", {"message_id": message_id, "before": before, "after": after},
                         message_id=message_id)
        return [self._message(d, self.user_id) for d in out]

    def session_messages(self, session_id: str) -> list[Message]:
        out = self._call("GET", f"/v1/sessions/{quote(session_id, safe='')}/messages")
        return [self._message(d, self.user_id) for d in out]

    def recent(self, n: int, session_id: str | None = None) -> list[Message]:
        params = {"n": n} | ({"session_id": session_id} if session_id else {})
        return [self._message(d, self.user_id) for d in self._call("GET", "/v1/recent", params=params)]

    def speakers(self) -> dict[str, set[str]]:
        return {role: set(names) for role, names in self._call("GET", "/v1/speakers").items()}

    def count(self) -> int:
        return int(self._call("GET", "/v1/count")["count"])

    @property
    def source(self) -> str:
        return self.url

    # --- history (seed session-l1-l2-memory §7.2) ---------------------------------------------------
    def session_list(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._call("GET", "/api/session-list", params={"limit": limit})

    def conversation_history(self, session_id: str, limit: int = 50) -> list[dict[str, Any]]:
        try:
            return self._call("GET", "/api/conversation-history", params={"session_id": session_id, "limit": limit})
        except ServiceError as e:
            if "HTTP 404" in str(e):
                raise SessionNotFoundError(session_id) from None
            raise


def _detail(r) -> str:
    try:
        detail = r.json().get("detail")
    except ValueError:
        return r.text[:300]
    if isinstance(detail, list):  # FastAPI validation errors: name each field
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:]) or 'body'}: {d.get('msg')}" for d in detail)
    return str(detail)


def _iso(ts) -> str | None:
    if ts is None or isinstance(ts, str):
        return ts
    if isinstance(ts, datetime):
        return ts.isoformat()
    raise ValueError(f"times must be datetimes or ISO 8601 text, got {type(ts).__name__}")


def _filter(f) -> dict | None:
    if f is None:
        return None
    if hasattr(f, "model_dump"):
        f = f.model_dump(mode="json", exclude_none=True)
    out = dict(f)
    tr = out.get("time_range")
    if tr is not None:
        tr = tr.model_dump() if hasattr(tr, "model_dump") else dict(tr)
        out["time_range"] = {k: _iso(v) for k, v in tr.items()}
    return out


def _flat(v):
    arr = np.asarray(v, dtype=np.float64)
    return arr.reshape(-1) if arr.ndim == 2 and arr.shape[0] == 1 else arr
