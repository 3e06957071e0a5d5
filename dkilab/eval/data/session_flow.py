"""`session_flow`: multi-turn bank-credit dialogues for the session-memory flow (dkilab's own text,
`datasets/fixtures/session/`, card in `datasets/fixtures/README.md`).

Two conversations, one per language: the knowledge base's documents are the messages (message id =
document id, `metadata` domain / object / stage), and each dialogue is one question whose task inputs
are its turns' queries and a user of its own (`task`: dialogue_id, user, turns). The gold per turn
(intent, business object, stage, L2 state after the turn, documents, answer phrase, tags) is in
`metadata["gold"]`; the runner scores one row per turn (`dkilab.eval.scoring.session`). `limit` takes
dialogues alternately from each language.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.config import read_yaml, validate
from dkilab.eval.data.base import register_dataset, require
from dkilab.types import Conversation, Message, QAItem

DIR = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "session"
KB, DIALOGUES = DIR / "knowledge_base.yaml", DIR / "dialogues.yaml"
KINDS = ("first", "ellipsis", "explicit", "topic_switch", "object_change", "backward_stage")
START = datetime.fromisoformat("2026-01-05T09:00:00+00:00")


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    domain: str
    object: str
    stage: str
    zh: str
    en: str
    answer_zh: str
    answer_en: str


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: str = Field(min_length=1)
    kind: list[str] = Field(min_length=1)
    gold: tuple[str, str | None, str | None]  # intent, business_object, operation_stage
    l2: tuple[str, str | None, str | None] | None = None  # the state after the turn, when it differs from gold
    docs: list[str] = Field(min_length=1)

    @field_validator("kind")
    @classmethod
    def _kinds(cls, v):
        bad = [k for k in v if k not in KINDS]
        if bad:
            raise ValueError(f"unknown turn kinds {bad} (known: {list(KINDS)})")
        return v


class Dialogue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    language: Literal["zh", "en"]
    turns: list[Turn] = Field(min_length=1, max_length=20)


def _check(dialogue: Dialogue, docs: dict[str, Document], schema, src: Path) -> None:
    for n, t in enumerate(dialogue.turns, 1):
        where = f"{src}: dialogue {dialogue.id} turn {n}"
        for name, triple in (("gold", t.gold), ("l2", t.l2)):
            if triple is None:
                continue
            intent, obj, stage = triple
            if intent not in schema.intents:
                raise ValueError(f"{where}: {name} intent {intent!r} is not one of {list(schema.intents)}")
            if obj is not None and obj not in schema.objects:
                raise ValueError(f"{where}: {name} business object {obj!r} is not one of {list(schema.objects)}")
            if stage is not None and stage not in schema.stages:
                raise ValueError(f"{where}: {name} stage {stage!r} is not one of {list(schema.stages)}")
        missing = [d for d in t.docs if d not in docs]
        if missing:
            raise ValueError(f"{where}: documents {missing} are not in the knowledge base")


def _read_items(path: Path, model, kind: str, how: str) -> list:
    """A YAML list of `model` items with unique ids; errors name the file and the item."""
    raw = read_yaml(require(path, f"session-flow {kind}s", how))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of {kind}s")
    items = [validate(model, d, str(path), f"{kind} {d.get('id', i) if isinstance(d, dict) else i}")
             for i, d in enumerate(raw)]
    dup = sorted(k for k, n in Counter(d.id for d in items).items() if n > 1)
    if dup:
        raise ValueError(f"{path}: duplicate {kind} ids {dup}")
    return items


def load_documents(path: Path = KB) -> dict[str, Document]:
    docs = _read_items(path, Document, "document", "It ships with the repository (datasets/fixtures/session/).")
    return {d.id: d for d in docs}


def load_dialogues(path: Path = DIALOGUES, docs: dict[str, Document] | None = None) -> list[Dialogue]:
    docs = docs if docs is not None else load_documents()
    out = _read_items(path, Dialogue, "dialogue", "They ship with the repository (datasets/fixtures/session/).")
    schema = DomainSchema.load()
    for d in out:
        _check(d, docs, schema, path)
    return out


def _gold(t: Turn, doc: Document, lang: str, schema) -> dict:
    def entry(triple):
        intent, obj, stage = triple
        return {"intent": intent, "active_domain": [schema.domain_of(intent)], "business_object": obj,
                "operation_stage": stage}
    return {"query": t.q, "category": t.kind[0], "tags": list(t.kind), "meaning": entry(t.gold),
            "l2": entry(t.l2 or t.gold), "docs": list(t.docs), "answer": getattr(doc, f"answer_{lang}")}


@register_dataset("session_flow", language="mixed", scorer="auto", version="1",
                  description="Session-flow dialogues (dkilab's own, 32 bank-credit dialogues of 3-6 turns, zh+en): "
                              "gold intent, entities, L2 state and documents per turn.",
                  sources=(str(KB), str(DIALOGUES)))
def load_session_flow(data=None, limit: int | None = None, question_limit: int | None = None,
                      path: str | Path | None = None) -> list[Conversation]:
    schema = DomainSchema.load()
    docs = load_documents()
    dialogues = load_dialogues(Path(path) if path else DIALOGUES, docs)
    by_lang = {lang: [d for d in dialogues if d.language == lang] for lang in ("zh", "en")}
    order = [d for pair in zip(*by_lang.values()) for d in pair]  # alternate languages, then the rest
    order += [d for ds in by_lang.values() for d in ds[len(order) // 2:]]
    chosen = {d.id for d in order[:limit]}
    out = []
    for lang in ("zh", "en"):
        kb_user = f"session-kb-{lang}"
        msgs = [Message(d.id, kb_user, f"kb-{d.domain}", 0, "system", getattr(d, lang), START + timedelta(minutes=i),
                        topic=d.object, metadata={"domain": d.domain, "object": d.object, "stage": d.stage})
                for i, d in enumerate(docs.values())]
        items = []
        for d in by_lang[lang]:
            if d.id not in chosen:
                continue
            gold = [_gold(t, docs[t.docs[0]], lang, schema) for t in d.turns]
            task = {"dialogue_id": d.id, "user": f"session-user-{d.id}", "turns": [t.q for t in d.turns]}
            items.append(QAItem(" / ".join(t.q for t in d.turns), gold[-1]["answer"], "dialogue",
                                sorted({x for t in d.turns for x in t.docs}), True, START + timedelta(days=1), qid=d.id,
                                metadata={"gold": {"turns": gold}}, task=task))
        if items:
            out.append(Conversation(kb_user, kb_user, msgs, items[:question_limit], "cn" if lang == "zh" else "en"))
    return out
