"""RecallConfig: the seed's `dki.recall` YAML block (recall-v4 §6), validated, plus dkilab's fusion knobs."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dkilab.config import knob, knob_setting, merge_nested, read_yaml, set_dotted, validate
from dkilab.recall.formatters import FORMATTERS
from dkilab.recall.learned import load_model
from dkilab.recall.signals import SIGNALS
from dkilab.registry import did_you_mean


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SignalsConfig(_Strict):
    keyword_enabled: bool = True  # keyword + weight retrieval (BM25 over jieba keywords)
    keyword_topk: int = Field(8, ge=1, le=50)  # keywords extracted from the query (seed: 5)
    keyword_method: Literal["tfidf", "textrank"] = "tfidf"
    # the parts of speech a Chinese keyword may be: dkilab's (the seed's plus English words and numbers inside
    # Chinese text) or the seed's own n/nr/ns/nt/nz/v/vn (§5.1.2)
    keyword_pos: Literal["dkilab", "seed"] = knob("dkilab", off="dkilab")
    vector_enabled: bool = True  # vector similarity retrieval
    vector_top_k: int = Field(50, ge=1, le=1000)  # (seed: 10)
    # minimum cosine similarity (seed: 0.5, which drops most relevant MiniLM / e5 cosines; the fused rank decides)
    vector_threshold: float = Field(0.0, ge=-1, le=1)
    reference_enabled: bool = True  # reference resolution (ReferenceResolver)
    # the history a question with no session id resolves its reference against: `scope`, the conversation's
    # latest turns up to the widest scope the resolver maps a cue to (最近 = 50 turns, 刚才 = 3: each scope keeps
    # its own window, seed §2.2.2), or `recent`, the last 2 x default_recall_turns messages
    reference_window: Literal["recent", "scope"] = "scope"
    # a question that refers back to at most this many turns ("刚才" = 3, an assistant's last stance = 1) has
    # those turns lead the ranking whatever the fusion made of them (seed §2.2.2 step 1); 0 = off, so the
    # referenced turns are one feature of the fusion, as before (which ranks the seed's "刚才" example 51st of 55)
    reference_front: int = knob(0, ge=0, le=50, off=0)
    # which cues take the front: `said`, a "just" / "刚才" only with what was said ("you just said", "刚才你说的";
    # "I just finished the race" dates the user's news: recall/reference.py refers_back), other cues the resolver
    # is sure of as they are; `any`, every cue whose scope is that short (the rule before, the ablation)
    reference_front_rule: Literal["said", "any"] = knob_setting("reference_front", "said")
    # --- dkilab additions (not in the seed): how the signals are fused --------------------
    # The defaults are the dev-split winner (experiments/retrieval_tune_dev.yaml), checked on held-back data
    # by `dkilab bench retrieval`; the seed's own values are noted where they differ.
    lexical_query: Literal["keywords", "full"] = "full"  # BM25 over the whole query (stopwords dropped) or the keywords
    lexical_top_k: int = Field(50, ge=1, le=200)
    # weighted min-max scores, reciprocal-rank fusion, or `learned`: the weighted fusion's list and the session
    # neighbours of its top hits, ordered by a logistic regression over their features (recall/learned.py);
    # `seed`: the seed's own ranking (§2.2.2-2.2.3, recall/seed_ranking.py): keyword-weight sum + cosine
    fusion: Literal["rrf", "weighted", "learned", "seed"] = "learned"
    # the learned fusion's weights: a JSON file (None = the shipped dkilab/recall/fusion_lr.json); its digest
    # is part of a cell's identity (added after cells were logged: `off` keeps it out while unset)
    fusion_model: str | None = knob(None, off=None)
    rrf_k: int = Field(60, ge=1)
    weights: dict[str, float] = Field(default_factory=lambda: {"keyword": 1.0, "vector": 0.6, "reference": 0.3})
    neighbor_expansion: int = Field(0, ge=0, le=5)  # add +-n session neighbours of the top hits
    neighbor_top: int = Field(5, ge=0, le=100)  # ... of this many top hits
    neighbor_decay: float = Field(0.5, ge=0, le=1)  # neighbour score = decay x anchor score
    session_boost: float = Field(0.0, ge=0)  # boost by the share of hits the message's session holds
    # when the query names exactly one speaker of this memory, candidates come from that speaker's
    # messages; the unfocused lists still count with this weight (0 = off: no focusing)
    speaker_focus: float = Field(0.3, ge=0, le=1)
    # when the query carries a date cue ("last week", "in May", 5月7日: recall/temporal.py) resolved against
    # when it is asked, candidates come from that window; the unfocused lists count with this weight (0 = off)
    temporal_focus: float = Field(0.0, ge=0, le=1)
    # pseudo-relevance feedback: the keywords of the top `prf_docs` fused hits that the query lacks (up to
    # `prf_terms`) are added to it for a second BM25 search, fused with weight `prf_weight` (0 docs = off)
    # (added after cells were logged: `off` keeps them out of a cell's identity while prf_docs is 0)
    prf_docs: int = knob(0, ge=0, le=20, off=0)
    prf_terms: int = knob_setting("prf_docs", 5, ge=1, le=30)
    prf_weight: float = knob_setting("prf_docs", 0.5, ge=0, le=2)
    # signals of dkilab/recall/signals/ switched on, each with its weight in the weighted fusion; under the
    # learned fusion their declared features join the rows (zero weight where the model was not fitted with them)
    plugins: dict[str, float] = knob({}, off={})

    @field_validator("fusion_model")
    @classmethod
    def _model_loads(cls, v: str | None) -> str | None:
        if v is not None:
            load_model(v)  # a missing or malformed file is refused when the config is read, naming it
        return v

    @field_validator("plugins")
    @classmethod
    def _plugins_known(cls, v: dict[str, float]) -> dict[str, float]:
        for name, weight in v.items():
            if name not in SIGNALS:
                raise ValueError(f"unknown recall signal {name!r}{did_you_mean(name, SIGNALS)}; "
                                 f"registered: {', '.join(SIGNALS.names())}")
            if weight < 0:
                raise ValueError(f"recall signal {name!r}: weight {weight} is below 0")
        return v


class BudgetConfig(_Strict):
    # tokens kept free for what is generated; None (default) = the strategy's max_new_tokens, plus
    # max_fact_tokens and a follow-up line per round when fact calls are on (the seed's example: 512)
    generation_reserve: int | None = Field(None, ge=0)
    instruction_reserve: int = Field(150, ge=0)  # the constraint instruction, formatter lines, template
    min_recent_turns: int = Field(2, ge=0)
    max_recent_turns: int = Field(5, ge=0)
    # the seed's §2.3 accounting: the fact room and the constraint are taken out of the history budget.
    # Off (default): the matched history budget is what every strategy shows the model, and the fact room
    # is kept free in the window beside it (spent only when the model calls)
    reserve_from_history: bool = False

    @model_validator(mode="after")
    def _order(self):
        if self.min_recent_turns > self.max_recent_turns:
            raise ValueError(f"min_recent_turns ({self.min_recent_turns}) > max_recent_turns ({self.max_recent_turns})")
        return self


class SummaryConfig(_Strict):
    # messages longer than this (tokens) become summaries; a fact call pages them in sentence chunks
    per_message_threshold: int = Field(200, ge=1)
    max_tokens_per_summary: int = Field(150, ge=1)
    strategy: Literal["extractive", "llm"] = "extractive"  # extractive (jieba TextRank) | llm (the model itself)


class FactCallConfig(_Strict):
    enabled: bool = True
    max_rounds: int = Field(3, ge=0, le=20)  # fact calls followed per question; 0 = none (no call is offered)
    max_fact_tokens: int = Field(800, ge=1)  # fact-segment tokens per question, and per call
    batch_size: int = Field(5, ge=1, le=100)  # records per call when the call gives no `limit` (offset+limit)
    # how the call is offered: native = a tool in the model's chat template (apply_chat_template(tools=...));
    # text = the seed's text protocol through the formatter; auto = native where the template renders tools
    protocol: Literal["auto", "native", "text"] = "auto"

    @property
    def active(self) -> bool:
        """Whether calls are offered and followed at all."""
        return self.enabled and self.max_rounds > 0


# `recall: {preset: seed}`: the recall stage as seed recall-v4 §2.2 and §6 state it. Keys given beside the
# preset override it (a sweep moves one value off the seed's). The budget, summary and fact-call defaults
# are already §6's values, but for generation_reserve, which dkilab derives from what is generated.
PRESETS: dict[str, dict[str, Any]] = {
    "seed": {"signals": {
        "keyword_enabled": True, "keyword_topk": 5, "keyword_method": "tfidf", "keyword_pos": "seed",
        "vector_enabled": True, "vector_top_k": 10, "vector_threshold": 0.5, "reference_enabled": True,
        "fusion": "seed", "lexical_query": "keywords", "speaker_focus": 0.0, "temporal_focus": 0.0,
        "prf_docs": 0, "neighbor_expansion": 0, "session_boost": 0.0,
        # §2.2.2 step 1, the reference decides where recall looks: a question that refers back to the last
        # 1-3 turns ("刚才你说的") or to the assistant's last stance has those turns lead
        "reference_front": 3}},
}


class RecallConfig(_Strict):
    # a named set of values (PRESETS) under the keys given with it; None: dkilab's defaults
    preset: Literal["seed"] | None = knob(None, off=None)
    enabled: bool = True
    strategy: Literal["summary_with_fact_call", "flat_history"] = "summary_with_fact_call"
    signals: SignalsConfig = Field(default_factory=SignalsConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    summary: SummaryConfig = Field(default_factory=SummaryConfig)
    fact_call: FactCallConfig = Field(default_factory=FactCallConfig)
    prompt_formatter: str = "auto"  # auto | a registered formatter: generic | deepseek | glm
    default_recall_turns: int = Field(5, ge=0)  # used when the resolver finds no reference

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") in PRESETS:
            return merge_nested(PRESETS[data["preset"]], data)
        return data

    @field_validator("prompt_formatter")
    @classmethod
    def _formatter(cls, v: str) -> str:
        if v != "auto" and v not in FORMATTERS:
            raise ValueError(f"unknown prompt formatter {v!r}; known: auto, {', '.join(FORMATTERS.names())}")
        return v

    @property
    def fact_calls_active(self) -> bool:
        """Fact calls are offered and followed: summaries with fact calls, calls enabled, max_rounds > 0."""
        return self.strategy == "summary_with_fact_call" and self.fact_call.active

    def with_updates(self, updates: dict[str, Any]) -> "RecallConfig":
        """A copy with dotted-key updates applied, e.g. {"summary.per_message_threshold": 100}."""
        data = self.model_dump()
        for key, value in updates.items():
            set_dotted(data, key, value, create=False, where=f"recall config key {key!r}")
        return validate_recall_config(data, source="updates")


def validate_recall_config(data: dict[str, Any] | None, source: str = "<dict>") -> RecallConfig:
    """Validate a `recall:` block; accepts the block, `{recall: ...}` or `{dki: {recall: ...}}`."""
    data = data or {}
    if isinstance(data, dict) and "dki" in data:
        data = data["dki"] or {}
    if isinstance(data, dict) and "recall" in data and isinstance(data["recall"], dict):
        data = data["recall"]
    return validate(RecallConfig, data, source, "recall config", prefix="recall")


def load_recall_config(path: str | Path) -> RecallConfig:
    return validate_recall_config(read_yaml(path), source=str(path))
