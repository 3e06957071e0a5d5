"""ReferenceResolver (seed reference-resolver.md): "刚才 / 那件事 / 你之前说的 / just now / you said
earlier" -> a recall scope and, given history, the content it points at.

Fixes of the seed's §6 notes: English keywords match on word boundaries ("just" does not fire
inside "adjust"); the longest matching keyword wins whatever the table order ("你上次说" is a stance,
not the temporal "上次"); stance-cache `updated_at` values are compared as datetimes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dkilab.config import read_yaml, validate
from dkilab.text.lang import detect_language
from dkilab.types import to_utc


class ReferenceType(str, Enum):
    TEMPORAL = "temporal"
    REFERENTIAL = "referential"
    STANCE = "stance"
    NONE = "none"


class ReferenceScope(str, Enum):
    LAST_1_3_TURNS = "last_1_3_turns"
    LAST_5_10_TURNS = "last_5_10_turns"
    CURRENT_SESSION = "current_session"
    LAST_SHARED_TOPIC = "last_shared_topic"
    ASSISTANT_LAST_STANCE = "assistant_last_stance"
    CUSTOM = "custom"


@dataclass
class ResolvedReference:
    reference_type: ReferenceType
    scope: ReferenceScope
    resolved_content: str | None = None
    confidence: float = 0.0
    source_turns: list[int] = field(default_factory=list)  # indices into the history given to resolve()
    matched_keyword: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def recall_turns(self) -> int | None:
        """Suggested number of turns to recall (a turn = user + assistant message)."""
        return self.metadata.get("recall_turns")


class Mapping(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    scope: ReferenceScope
    type: ReferenceType
    confidence: float = Field(0.9, ge=0, le=1)


def _m(scope: str, type_: str, confidence: float = 0.9) -> dict[str, Any]:
    return {"scope": scope, "type": type_, "confidence": confidence}


DEFAULT_MAPPINGS_CN: dict[str, Any] = {
    "刚刚": _m("last_1_3_turns", "temporal"), "刚才": _m("last_1_3_turns", "temporal"),
    "最近": _m("current_session", "temporal"),
    "那件事": _m("last_shared_topic", "referential"), "那个问题": _m("last_shared_topic", "referential"),
    "那个话题": _m("last_shared_topic", "referential"),
    "之前你说的": _m("assistant_last_stance", "stance"), "你上次说": _m("assistant_last_stance", "stance"),
    "你之前提到": _m("assistant_last_stance", "stance"),
    "上次": _m("last_5_10_turns", "temporal"), "前几天": _m("last_5_10_turns", "temporal"),
}
DEFAULT_MAPPINGS_EN: dict[str, Any] = {
    "just now": _m("last_1_3_turns", "temporal"),
    "just": _m("last_1_3_turns", "temporal", 0.4),  # "I just want..." is rarely a reference: low confidence
    "recently": _m("current_session", "temporal"),
    "that thing": _m("last_shared_topic", "referential"),
    "you said earlier": _m("assistant_last_stance", "stance"),
    "last time": _m("last_5_10_turns", "temporal"),
}
OPINION_MARKERS = {
    "cn": ("我认为", "我觉得", "我建议", "我的看法是"),
    "en": ("I think", "I believe", "I suggest", "I recommend", "in my opinion"),
}
ROLE_LABELS = {"cn": {"user": "用户", "assistant": "助手"}, "en": {"user": "User", "assistant": "Assistant"}}


# A "just" / "刚才" that points at what was said: a speech verb with it ("you just said", "刚才你说的", "what you said
# just now"). Without one it mostly dates the user's own news ("I just finished the race", "我刚刚到家"):
# `refers_back` then says the question does not point at the last turns (signals.reference_front reads it).
_SAID_EN = (r"sa(?:y|id)|mention(?:ed)?|t(?:ell|old) me|ask(?:ed)? me|suggest(?:ed)?|recommend(?:ed)?|wr(?:ite|ote)|"
            r"g(?:ive|ave) me|describe[d]?|list(?:ed)?|explain(?:ed)?|share[d]?|show(?:ed)? me|answer(?:ed)?|"
            r"repl(?:y|ied)|propose[d]?|offer(?:ed)?|br(?:ing|ought) up")
_JUST_SAID = {
    "en": re.compile(rf"(?<!\w)(?:you(?:'ve| have)?\s+just\s+(?:{_SAID_EN})"
                     r"|(?:i|we)(?:'ve| have)?\s+just\s+(?:sa(?:y|id)|mention(?:ed)?|discuss(?:ed)?|talk(?:ed)? about)"
                     rf"|(?:{_SAID_EN}|discussed|talked about)(?!\w)[^.?!]{{0,40}}?"
                     r"(?:just now|a (?:moment|minute|second) ago))(?!\w)"),
    "cn": re.compile(r"(?:刚才|刚刚)[^，。！？,.!?]{0,4}?(?:说|提到|讲|问|聊|推荐|建议|回答)"
                     r"|(?:说|提到|讲|问|聊|推荐|建议)[^，。！？,.!?]{0,2}?(?:刚才|刚刚)"),
}
FRONT_CONFIDENCE = 0.5  # a cue below it (the bare "just", 0.4) never takes the front on its own


def refers_back(query: str, ref: ResolvedReference) -> bool:
    """Whether a resolved question points at the turns its cue maps to (signals.reference_front): a referential or
    stance cue the resolver is sure of ("that thing", "之前你说的", "you said earlier"), or a "just" / "刚才" with
    what was said ("you just said", "刚才你说的那个方案"). "I just finished the race" and "我刚刚到家" date the
    user's own news and do not."""
    if ref.reference_type == ReferenceType.NONE:
        return False
    if ref.scope == ReferenceScope.LAST_1_3_TURNS and ref.reference_type == ReferenceType.TEMPORAL:
        pattern = _JUST_SAID.get(ref.metadata.get("language", "en"), _JUST_SAID["en"])
        return bool(pattern.search(query.lower()))
    return ref.confidence >= FRONT_CONFIDENCE


class ReferenceResolverConfig(BaseModel):
    """Resolver settings; `from_yaml` reads a file whose keys are these (optionally under
    `reference_resolver:` or `dki: reference_resolver:`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    last_few_turns: int = Field(3, ge=1)
    recent_turns: int = Field(10, ge=1)
    session_max_turns: int = Field(50, ge=1)
    use_llm_fallback: bool = False
    llm_fallback_threshold: float = Field(0.5, ge=0, le=1)
    reference_mappings_cn: dict[str, Mapping] = Field(default_factory=lambda: dict(DEFAULT_MAPPINGS_CN))
    reference_mappings_en: dict[str, Mapping] = Field(default_factory=lambda: dict(DEFAULT_MAPPINGS_EN))

    @field_validator("reference_mappings_cn", "reference_mappings_en")
    @classmethod
    def _keywords_not_empty(cls, v):
        if any(not k.strip() for k in v):
            raise ValueError("mapping keywords must be non-empty")
        return v

    @classmethod
    def from_yaml(cls, path: str | Path) -> "ReferenceResolverConfig":
        raw = read_yaml(path) or {}
        for key in ("dki", "reference_resolver"):
            if isinstance(raw, dict) and key in raw:
                raw = raw[key]
                if key == "dki" and "reference_resolver" in raw:
                    raw = raw["reference_resolver"]
        return validate(cls, raw, str(path), "reference resolver config")


def _field(msg: Any, name: str) -> Any:
    return msg.get(name) if isinstance(msg, dict) else getattr(msg, name, None)


class ReferenceResolver:
    def __init__(self, config: ReferenceResolverConfig | None = None, language: str = "auto",
                 llm_resolver: Callable[[str, list | None], Any] | None = None):
        if language not in ("auto", "cn", "en"):
            raise ValueError(f"language must be 'auto', 'cn' or 'en', got {language!r}")
        self.config = config or ReferenceResolverConfig()
        self.language = language
        self.llm_resolver = llm_resolver
        self._patterns: dict[str, list[tuple[str, re.Pattern]]] = {}

    # --- configuration --------------------------------------------------------------------
    def update_config(self, just_now_turns: int | None = None, recently_turns: int | None = None,
                      last_few_turns: int | None = None, recent_turns: int | None = None,
                      session_max_turns: int | None = None) -> None:
        """Both naming styles are accepted; the new names (just_now_turns, recently_turns) win."""
        updates = {"last_few_turns": just_now_turns if just_now_turns is not None else last_few_turns,
                   "recent_turns": recently_turns if recently_turns is not None else recent_turns,
                   "session_max_turns": session_max_turns}
        data = self.config.model_dump() | {k: v for k, v in updates.items() if v is not None}
        self.config = ReferenceResolverConfig.model_validate(data)

    def add_mapping(self, keyword: str, scope: str, ref_type: str, language: str = "cn",
                    confidence: float = 0.9) -> None:
        if language not in ("cn", "en"):
            raise ValueError(f"language must be 'cn' or 'en', got {language!r}")
        target = self.config.reference_mappings_cn if language == "cn" else self.config.reference_mappings_en
        target[keyword] = Mapping(scope=scope, type=ref_type, confidence=confidence)
        self._patterns.pop(language, None)

    def _detect_language(self, text: str) -> str:
        return detect_language(text)

    # --- resolution -----------------------------------------------------------------------
    def _keyword_patterns(self, language: str) -> list[tuple[str, re.Pattern]]:
        if language not in self._patterns:
            table = self.config.reference_mappings_cn if language == "cn" else self.config.reference_mappings_en
            pats = []
            for kw in sorted(table, key=len, reverse=True):  # longest keyword first
                esc = re.escape(kw.lower())
                pats.append((kw, re.compile(esc if language == "cn" else rf"(?<!\w){esc}(?!\w)")))
            self._patterns[language] = pats
        return self._patterns[language]

    def recall_turns_for(self, scope: ReferenceScope) -> int | None:
        c = self.config
        return {ReferenceScope.LAST_1_3_TURNS: c.last_few_turns, ReferenceScope.LAST_5_10_TURNS: c.recent_turns,
                ReferenceScope.CURRENT_SESSION: c.session_max_turns,
                ReferenceScope.LAST_SHARED_TOPIC: c.last_few_turns * 2,
                ReferenceScope.ASSISTANT_LAST_STANCE: c.recent_turns}.get(scope)

    def match(self, query: str, language: str) -> tuple[str, Mapping] | None:
        text = query.lower()
        table = self.config.reference_mappings_cn if language == "cn" else self.config.reference_mappings_en
        for kw, pat in self._keyword_patterns(language):
            if pat.search(text):
                return kw, table[kw]
        return None

    def resolve(self, query: str, history: list | None = None, stance_cache: Any = None) -> ResolvedReference:
        if not isinstance(query, str) or not query.strip():
            return ResolvedReference(ReferenceType.NONE, ReferenceScope.CUSTOM, metadata={"reason": "empty query"})
        language = self._detect_language(query) if self.language == "auto" else self.language
        found = self.match(query, language)
        if found is not None:
            kw, mapping = found
            result = ResolvedReference(mapping.type, mapping.scope, confidence=mapping.confidence, matched_keyword=kw,
                                       metadata={"language": language,
                                                 "recall_turns": self.recall_turns_for(mapping.scope),
                                                 "method": "rule"})
            if history:
                result.resolved_content, result.source_turns = self._resolve_by_scope(
                    mapping.scope, mapping.type, history, stance_cache, language)
            if mapping.confidence >= self.config.llm_fallback_threshold or not self._llm_enabled():
                return result
            return self._llm_resolve(query, history, language) or result
        if self._llm_enabled():
            llm = self._llm_resolve(query, history, language)
            if llm is not None:
                return llm
        return ResolvedReference(ReferenceType.NONE, ReferenceScope.CUSTOM, metadata={"language": language})

    def _llm_enabled(self) -> bool:
        return self.config.use_llm_fallback and self.llm_resolver is not None

    def _llm_resolve(self, query: str, history: list | None, language: str) -> ResolvedReference | None:
        """Ask the `llm_resolver(query, history)` callback; it returns a ResolvedReference, a dict with
        scope/type(/confidence), or None."""
        if self.llm_resolver is None:
            return None
        out = self.llm_resolver(query, history)
        if out is None or isinstance(out, ResolvedReference):
            return out
        scope, ref_type = ReferenceScope(out["scope"]), ReferenceType(out.get("type", out.get("reference_type")))
        res = ResolvedReference(ref_type, scope, confidence=float(out.get("confidence", 0.5)),
                                metadata={"language": language, "recall_turns": self.recall_turns_for(scope),
                                          "method": "llm"})
        if history:
            res.resolved_content, res.source_turns = self._resolve_by_scope(scope, ref_type, history, None, language)
        return res

    def _resolve_by_scope(self, scope: ReferenceScope, ref_type: ReferenceType, history: list,
                          stance_cache: Any = None, language: str = "cn") -> tuple[str | None, list[int]]:
        c = self.config
        if scope == ReferenceScope.LAST_1_3_TURNS:
            return self._tail(history, c.last_few_turns, language)
        if scope == ReferenceScope.LAST_5_10_TURNS:
            return self._tail(history, c.recent_turns, language)
        if scope == ReferenceScope.CURRENT_SESSION:
            return self._tail(history, c.session_max_turns, language)
        if scope == ReferenceScope.LAST_SHARED_TOPIC:
            for i in range(len(history) - 1, -1, -1):
                if _field(history[i], "topic"):
                    idx = list(range(max(0, i - 2), min(len(history), i + 3)))
                    return self._format(history, idx, language), idx
            return self._tail(history, c.last_few_turns, language)
        if scope == ReferenceScope.ASSISTANT_LAST_STANCE:
            cached = self._latest_stance(stance_cache)
            if cached is not None:
                topic, stance = cached
                return (f"关于「{topic}」: {stance}" if language == "cn" else f'On "{topic}": {stance}'), []
            markers = [m.lower() for ms in OPINION_MARKERS.values() for m in ms]
            for i in range(len(history) - 1, -1, -1):
                if _field(history[i], "role") == "assistant":
                    text = _field(history[i], "content") or ""
                    if any(m in text.lower() for m in markers):
                        return text, [i]
            return None, []
        return None, []

    def _tail(self, history: list, turns: int, language: str) -> tuple[str, list[int]]:
        idx = list(range(max(0, len(history) - turns * 2), len(history)))
        return self._format(history, idx, language), idx

    @staticmethod
    def _format(history: list, idx: Iterable[int], language: str) -> str:
        labels = ROLE_LABELS[language]
        sep = ": "
        return "\n".join(f"{labels.get(_field(history[i], 'role'), _field(history[i], 'role'))}{sep}"
                         f"{_field(history[i], 'content')}" for i in idx)

    @staticmethod
    def _latest_stance(stance_cache: Any) -> tuple[str, str] | None:
        """Newest entry of a stance cache: {topic: {stance, updated_at}} or [{topic, stance, updated_at}]."""
        if not stance_cache:
            return None
        entries = ([{"topic": t, **v} for t, v in stance_cache.items()] if isinstance(stance_cache, dict)
                   else list(stance_cache))
        def when(e):
            ts = e.get("updated_at")
            return to_utc(ts) if ts is not None else datetime.min.replace(tzinfo=to_utc(0).tzinfo)
        best = max(entries, key=when)
        return str(best.get("topic")), str(best.get("stance"))


def create_reference_resolver(config_path: str | Path | None = None, last_few_turns: int | None = None,
                              recent_turns: int | None = None, language: str = "auto",
                              llm_resolver: Callable | None = None, **overrides: Any) -> ReferenceResolver:
    """A resolver from an optional YAML file, with keyword overrides on top."""
    config = ReferenceResolverConfig.from_yaml(config_path) if config_path else ReferenceResolverConfig()
    data = config.model_dump() | {k: v for k, v in {"last_few_turns": last_few_turns, "recent_turns": recent_turns,
                                                      **overrides}.items() if v is not None}
    return ReferenceResolver(ReferenceResolverConfig.model_validate(data), language=language, llm_resolver=llm_resolver)
