"""L2: business-state memory (seed session-l1-l2-memory §4) with the four inherit/override rules.

State: {session_id, current_customer_id, operation_chain: [{intent, active_domain, business_object,
operation_stage, last_action, last_update}, ...]}; the last chain entry is the current operation.
Every version is kept in SQLite for audit (the seed's ES index); the current state lives in the
hot backend (SQLite or Redis) and expires `l2_ttl` after its session's last use. Every call names the
user and needs the user's session (live, to update); an update is one compare-and-set on the backend,
so concurrent updates never lose one.
"""
from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Callable, Sequence

from dkilab.memory.sessions import SessionManager, SessionNotFoundError, check_user, iso
from dkilab.memory.sqlite import transaction, with_retry

DEFAULT_STAGE_ORDER = ("创建", "入库", "审批")
ENTRY_FIELDS = ("active_domain", "business_object", "operation_stage", "last_action")

AUDIT_SCHEMA = """
CREATE TABLE IF NOT EXISTS l2_versions(
    session_id TEXT NOT NULL, version INTEGER NOT NULL, state TEXT NOT NULL, rule TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY(session_id, version));
"""


class L2Memory:
    def __init__(self, sessions: SessionManager, conn: sqlite3.Connection,
                 stage_order: Sequence[str] = DEFAULT_STAGE_ORDER, clock: Callable[[], float] = time.time):
        if len(set(stage_order)) != len(stage_order):
            raise ValueError(f"stage_order has repeated stages: {list(stage_order)}")
        self.sessions, self.backend, self.conn = sessions, sessions.backend, conn
        self.stage_order, self.clock = tuple(stage_order), clock
        with_retry(lambda: conn.executescript(AUDIT_SCHEMA))

    @property
    def ttl(self) -> float:
        return self.sessions.l2_ttl

    def _owned(self, session_id: str, user_id) -> str:
        user = check_user(user_id)
        if self.sessions.owner(session_id) != user:
            raise SessionNotFoundError(session_id)
        return user

    def get_l2_state(self, session_id: str, *, user_id: str | int) -> dict[str, Any] | None:
        """The session's current state (None when it has none or it expired)."""
        self._owned(session_id, user_id)
        return self.backend.get_l2(session_id, self.clock())

    def update_l2_state(self, session_id: str, intent: str, entities: dict[str, Any] | None,
                        previous_l2: dict[str, Any] | None = None, *, user_id: str | int) -> dict[str, Any]:
        """Merge a new (intent, entities) extraction into the session's state and save a new version
        (the rules below; `apply_update` also returns which rule applied)."""
        return self.apply_update(session_id, intent, entities, previous_l2, user_id=user_id)[0]

    def apply_update(self, session_id: str, intent: str, entities: dict[str, Any] | None,
                     previous_l2: dict[str, Any] | None = None, *, user_id: str | int) -> tuple[dict[str, Any], str]:
        """(new state, rule applied: new | overwrite_intent | overwrite_object | inherit).

        1. a different intent overwrites the whole state;
        2. same intent, business object not given -> inherit object/domain/stage from the last entry;
        3. an explicitly different business object overwrites (a new operation chain);
        4. the stage only moves forward along `stage_order` (a backwards or unknown stage is ignored).
        """
        if not isinstance(intent, str) or not intent.strip():
            raise ValueError(f"L2 update for session {session_id!r}: intent must be a non-empty string, got {intent!r}")
        if entities is not None and not isinstance(entities, dict):
            raise ValueError(
                f"L2 update for session {session_id!r}: entities must be a dict, got {type(entities).__name__}")
        entities = dict(entities or {})
        self.sessions.require(session_id, user_id)
        now = self.clock()
        rules: list[str] = []

        def update(current):
            state, rule = self._merge(session_id, intent, entities, previous_l2 if previous_l2 is not None else current,
                                      now)
            # versions never repeat, also after an expired state starts a new chain
            state["version"] = int((current or {}).get("version") or self._last_version(session_id)) + 1
            rules[:] = [rule]
            return state

        def audit(c, state):  # in the update's transaction where the backend has one (no misnumbered rows)
            row = (session_id, state["version"], json.dumps(state, ensure_ascii=False), rules[0], now)
            if c is not None:
                c.execute("INSERT INTO l2_versions VALUES(?,?,?,?,?)", row)
                return

            def save():
                with transaction(self.conn) as tx:
                    tx.execute("INSERT OR REPLACE INTO l2_versions VALUES(?,?,?,?,?)", row)
            with_retry(save)
        state = self.backend.update_l2(session_id, update, self.ttl, now, audit=audit)
        return state, rules[0]

    def _last_version(self, session_id: str) -> int:
        return self.conn.execute("SELECT COALESCE(MAX(version), 0) FROM l2_versions WHERE session_id=?",
                                 (session_id,)).fetchone()[0]

    def _merge(self, session_id: str, intent: str, entities: dict[str, Any], previous: dict[str, Any] | None,
               now: float) -> tuple[dict[str, Any], str]:
        """(new state, rule applied): the four rules on the previous state."""
        chain = [dict(e) for e in (previous or {}).get("operation_chain") or []]
        last = chain[-1] if chain else None
        obj = entities.get("business_object")
        fresh = {"intent": intent, **{k: entities.get(k) for k in ENTRY_FIELDS},
                 **{k: v for k, v in entities.items() if k not in ENTRY_FIELDS and k != "customer_id"}}
        customer = entities.get("customer_id")
        if last is None or last.get("intent") != intent:
            rule, chain = "overwrite_intent" if last else "new", [fresh]
        elif obj is not None and obj != last.get("business_object"):
            rule, chain = "overwrite_object", [fresh]
            customer = customer if customer is not None else (previous or {}).get("current_customer_id")
        else:
            rule = "inherit"
            entry = {k: (v if v is not None else last.get(k)) for k, v in fresh.items()}
            entry.update({k: v for k, v in last.items() if k not in entry and k != "last_update"})
            entry["operation_stage"] = self._forward_stage(last.get("operation_stage"), entities.get("operation_stage"))
            chain = chain + [entry]
            customer = customer if customer is not None else (previous or {}).get("current_customer_id")
        chain[-1]["last_update"] = iso(now)
        return {"session_id": session_id, "current_customer_id": customer, "operation_chain": chain}, rule

    def _forward_stage(self, old: str | None, new: str | None) -> str | None:
        if new is None or old is None:
            return new if old is None else old
        if new not in self.stage_order or old not in self.stage_order:
            return old if new not in self.stage_order else new
        return new if self.stage_order.index(new) >= self.stage_order.index(old) else old

    def history(self, session_id: str, *, user_id: str | int) -> list[dict[str, Any]]:
        """Every saved version of the session's L2 state, oldest first: {version, rule, created_at, state}."""
        self._owned(session_id, user_id)
        rows = self.conn.execute("SELECT version, state, rule, created_at FROM l2_versions WHERE session_id=? "
                                 "ORDER BY version", (session_id,)).fetchall()
        return [{"version": r["version"], "rule": r["rule"], "created_at": iso(r["created_at"]),
                 "state": json.loads(r["state"])} for r in rows]
