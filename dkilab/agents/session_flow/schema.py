"""The business vocabulary of the session flow (`bank_credit.yaml` by default): intents and their domains,
business objects and operation stages, with the words that name them in Chinese and English.

It is what the rule paths stand on (`find_*`: which intent / object / stage a text names) and what an
LLM's extraction is normalised against (`normalise`: an alias or an English name becomes the canonical
value; anything else is dropped, never stored in L2).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dkilab.config import read_yaml, validate

DEFAULT_SCHEMA = Path(__file__).with_name("bank_credit.yaml")
FIELDS = ("intent", "active_domain", "business_object", "operation_stage")


class _Words(BaseModel):
    model_config = ConfigDict(extra="forbid")
    zh: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)
    name_en: str | None = None  # how the rewriter names the value in an English query


class _Intent(_Words):
    domain: str = Field(min_length=1)


class DomainSchema(BaseModel):
    model_config = ConfigDict(extra="forbid")
    intents: dict[str, _Intent] = Field(min_length=1)
    default_intent: str
    objects: dict[str, _Words] = Field(min_length=1)
    stages: dict[str, _Words] = Field(min_length=1)  # in the order the stage moves (rule 4)

    @model_validator(mode="after")
    def _check(self):
        if self.default_intent not in self.intents:
            raise ValueError(f"default_intent {self.default_intent!r} is not one of the intents {list(self.intents)}")
        return self

    @classmethod
    def load(cls, path: str | Path | None = None) -> "DomainSchema":
        return _load(str(Path(path or DEFAULT_SCHEMA).resolve()))

    @property
    def stage_order(self) -> tuple[str, ...]:
        return tuple(self.stages)

    @property
    def domains(self) -> list[str]:
        return list(dict.fromkeys(i.domain for i in self.intents.values()))

    def domain_of(self, intent: str) -> str:
        return self.intents[intent].domain

    # --- what a text names --------------------------------------------------------------
    def find_intent(self, text: str) -> str | None:
        """The first intent (in schema order) one of whose words the text contains."""
        for name, words in self.intents.items():
            if _positions(text, words):
                return name
        return None

    def find_object(self, text: str) -> str | None:
        """The business object named last in the text ("客户申请授信": the credit line is asked about)."""
        found = [(pos, name) for name, words in self.objects.items() for pos in _positions(text, words)]
        return max(found)[1] if found else None

    def find_stage(self, text: str) -> str | None:
        """The stage named first in the text."""
        found = [(pos, name) for name, words in self.stages.items() for pos in _positions(text, words)]
        return min(found)[1] if found else None

    def name(self, kind: str, value: str, language: str) -> str:
        """How a rewritten query names a canonical value: itself in Chinese, `name_en` in English."""
        words = (self.objects if kind == "object" else self.stages)[value]
        return value if language == "cn" else (words.name_en or words.en[0])

    # --- normalising an LLM's extraction -------------------------------------------------
    def normalise(self, kind: str, value: Any) -> str | None:
        """A canonical intent / domain / object / stage from what a model wrote (the value itself, an
        alias, an English name, any case), else None."""
        if not isinstance(value, str) or not value.strip():
            return None
        v = value.strip()
        if kind == "intent":
            table = {k: [k] for k in self.intents}
        elif kind == "domain":
            table = {d: [d] for d in self.domains}
        else:
            table = {k: [k, *w.zh, *w.en, *([w.name_en] if w.name_en else [])]
                     for k, w in (self.objects if kind == "object" else self.stages).items()}
        for canon, names in table.items():
            if any(v.lower() == n.lower() for n in names):
                return canon
        return None

    def describe(self, language: str) -> str:
        """The allowed values, for the extraction prompt."""
        def vals(table):
            return ", ".join(f"{k} ({w.name_en or w.en[0]})" if language == "en" else k for k, w in table.items())
        return "\n".join([f"intent: {', '.join(self.intents)}", f"active_domain: {', '.join(self.domains)}",
                          f"business_object: {vals(self.objects)}", f"operation_stage: {vals(self.stages)}"])


@lru_cache(maxsize=8)
def _load(path: str) -> DomainSchema:
    return validate(DomainSchema, read_yaml(path), path, "session flow schema")


@lru_cache(maxsize=4096)
def _pattern(word: str) -> re.Pattern:
    if re.search(r"[a-zA-Z]", word):  # English: whole words (a hyphen joins words: "loan-to-value"), any case
        return re.compile(r"(?<![a-z-])" + re.escape(word.lower()) + r"(?![a-z-])")
    return re.compile(re.escape(word))


def _positions(text: str, words: _Words) -> list[int]:
    low = text.lower()
    return [m.start() for w in (*words.zh, *words.en) for m in _pattern(w).finditer(low)]
