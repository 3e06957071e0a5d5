"""Learned fusion (`signals.fusion: learned`): a logistic regression over features of each
recall candidate decides the final order, instead of hand weights.

The candidates are everything the signals found (the weighted fusion's whole list) plus the session
neighbours (the turn before and after) of its top `NEIGHBOR_TOP` hits: the evidence is often the turn next
to a hit (the answer to a question, or the question to an answer). For each candidate, `features` reads:
- the hand-weighted fused score and rank (the weighted fusion runs first and is one input);
- the query's cosine with the candidate's stored vector, with those of the turns before and after it
  (a turn embedded alone is found through the turn it replies to), their gap to the best and their rank;
- its BM25 score (the keyword signal) and rank, and those of its neighbours;
- whether it is the speaker the question names, a question itself, how long it is against the other
  candidates (the share of them shorter: a length that transfers between chat turns and long answers);
- how strongly its session is hit (best fused score, rank among sessions, hits in the top 50);
- the share of the question's keywords it contains;
- whether the question carries a date cue (recall/temporal.py) and how far the message lies from its window;
- per-question z-scores of the cosines, BM25 and fused scores (so one model serves encoders whose cosines
  sit at different levels).
Cosines come from the memory's `similarities` where it has one (the store: the stored vectors), else from
one wide `semantic_search`. Nothing here sees gold evidence or answers.

The weights ship in `fusion_lr.json`, one model per encoder family, with the figures they were chosen by,
and per family a second one for conversational cues (`cue_kind`: a turn that is not a question, for which
the related memories are wanted; the signals weigh differently there). `dkilab bench retrieval --train`
fits them on the declared dev split only (MiniLM: LoCoMo conversations 0-4 and the work sessions' users
0-11; multilingual-e5: the first half of
MemDaily's first 300 trajectories; the cue parts: the first half of MADial-Bench's dialogues in English
(MiniLM) and Chinese (e5): dkilab/bench/fusion_train.py; the fine-tuned English encoder `minilm-locomo`
has parts of its own, its LoCoMo one fitted out of fold by its study), through this module's own `candidates`, so
training and recall read the same numbers. The shipped model carries a range guard (`RangeGuard`; `--train
--no-guard` leaves it out): a question whose candidates lie outside the rows it was fitted on keeps the
weighted fusion's order. It won `dkilab bench retrieval --leave-one-dataset-out` (docs/retrieval.md).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dkilab.cache import stat_key
from dkilab.encoders.embedder import E5_EMBEDDER, LOCOMO_EMBEDDER, MINILM_BUILDS
from dkilab.recall.signals import SIGNALS
from dkilab.recall.temporal import RULES as DATE_RULES
from dkilab.recall.temporal import date_window
from dkilab.text.lang import detect_language
from dkilab.types import Memory, Message, RecalledMessage, VectorMemory, to_utc

DEFAULT_MODEL = Path(__file__).with_name("fusion_lr.json")
ROOT = Path(__file__).resolve().parents[2]  # the project root (experiments/models/ holds ablation models)
NEIGHBOR_TOP = 10  # the fused hits whose session neighbours join the candidates
SESSION_TOP = 50  # the fused hits that say how strongly a session is hit
WIDE = 1000  # semantic_search's cap: the cosine floor beyond it, where the memory has no `similarities`
FEATURES = ("fused", "log_fused_rank", "cos", "cos_gap", "log_cos_rank", "lex", "log_lex_rank", "speaker",
            "is_question", "chars_share", "prev_fused", "prev_cos", "prev_lex", "next_fused", "next_cos", "next_lex",
            "max_cos_prev", "max_cos_next", "session_best", "log_session_rank", "session_hits", "keyword_share",
            "date_cue", "in_window", "log_days_off", "z_cos", "z_lex", "z_fused", "z_prev_cos", "z_next_cos",
            "in_scope", "log_scope_rank")
QUESTION, UTTERANCE = "question", "utterance"  # `cue_kind`; an `utterance` part serves conversational cues
ROUTING = "cue3"  # the version of `cue_kind`'s rule, part of a model's digest (a cell's identity)
_CLOSERS = "\"'“‘「『(（"
_WH = re.compile(r"(?i)(?:what|when|where|who|whom|whose|which|why|how)\b(?!\s+an?\b)")  # not "What a day."
_AUX = re.compile(r"(?i)(am|is|are|was|were|do|does|did|can|could|would|will|should|shall|may|might|must|has|have|"
                  r"had)(?:n['’]t)?\s+([\w'’]+)")
_SUBJECTS = {"i", "you", "u", "he", "she", "it", "we", "they", "there", "this", "that", "these", "those", "anyone",
             "anybody", "anything", "someone", "somebody", "something", "everyone", "everybody", "everything"}
_DETERMINERS = {"the", "my", "your", "his", "her", "our", "their", "its"}  # "Did the kids ...", not "Had the best time"
_ZH_ASKS = re.compile(r"吗\s*(?:[。.，,…~～]|$)")  # a clause ending in 吗: "你还记得我说的那家店吗" (not 吗啡)
_Z = {"z_cos": "cos", "z_lex": "lex", "z_fused": "fused", "z_prev_cos": "prev_cos", "z_next_cos": "next_cos"}


class RangeGuard:
    """Whether a question's candidates lie outside the feature rows a model was fitted on (a
    learned fusion fitted on other datasets fell below the hand weights on a dataset it had not seen): the
    share of the candidates' feature values outside the fitted rows' `LOW`-`HIGH` percentiles, against the
    `QUANTILE` quantile of that share over the fitted questions. A model with a guard gives such a question
    the weighted fusion's order (`MultiSignalRecall._learned`)."""
    LOW, HIGH, QUANTILE = 0.5, 99.5, 0.99

    def __init__(self, lo: np.ndarray, hi: np.ndarray, limit: float):
        self.lo, self.hi, self.limit = lo, hi, float(limit)

    @classmethod
    def fit(cls, questions: list[np.ndarray]) -> "RangeGuard":
        """The guard of the feature rows of `questions` (one array per question)."""
        X = np.concatenate(questions)
        guard = cls(np.percentile(X, cls.LOW, axis=0), np.percentile(X, cls.HIGH, axis=0), 0.0)
        guard.limit = float(np.quantile([guard.share(q) for q in questions], cls.QUANTILE))
        return guard

    @classmethod
    def from_dict(cls, data: Any, source: str, names: list[str] | None = None,
                  columns: tuple[str, ...] = FEATURES) -> "RangeGuard":
        """The guard of a model file whose rows have the features `names` (default `FEATURES`), over the
        model's `columns`; a feature it was not fitted with is never outside."""
        names = list(FEATURES) if names is None else names
        try:
            lo, hi = (np.asarray(data[k], dtype=np.float64) for k in ("lo", "hi"))
            limit = float(data["limit"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: its guard is malformed ({exc}): it needs lo, hi and limit") from None
        if lo.shape != hi.shape or lo.shape != (len(names),) or not 0.0 <= limit <= 1.0:
            raise ValueError(f"{source}: its guard needs lo and hi of {len(names)} numbers and a limit in [0, 1]")
        at = [columns.index(f) for f in names]
        full = np.array([np.full(len(columns), -np.inf), np.full(len(columns), np.inf)])
        full[:, at] = (lo, hi)
        return cls(full[0], full[1], limit)

    def to_dict(self) -> dict[str, Any]:
        return {"lo": self.lo.tolist(), "hi": self.hi.tolist(), "limit": self.limit}

    def share(self, X: np.ndarray) -> float:
        return float(((X < self.lo) | (X > self.hi)).mean()) if len(X) else 0.0

    def outside(self, X: np.ndarray) -> bool:
        return self.share(X) > self.limit


class FusionModel:
    """Standardised logistic regressions over `FEATURES`, one per encoder family (`minilm`, `e5`), or per family
    and question language (`e5:en`, `e5:zh`: the ablation model `experiments/models/fusion_lr_e5_english.json`):
    the cosines come from the store's encoder, whose scores sit at its own levels (e5's are compressed near
    0.8), and a single model over both traded LoCoMo recall for MemDaily NDCG; on the bilingual fixtures (an
    e5 store) the MiniLM part lost MRR to the hand weights where the e5 part gained. Only the order of the
    scores matters."""

    def __init__(self, data: dict[str, Any], source: str = "<dict>"):
        names = list(data.get("features", []))
        declared = {f for n in SIGNALS for f in SIGNALS.meta(n)["features"]}  # the recall signals' features
        unknown = [f for f in names if f not in FEATURES and f not in declared]
        if unknown or len(set(names)) != len(names) or not names:
            what = f"features dkilab does not compute: {', '.join(unknown)}" if unknown else "no features, or one twice"
            raise ValueError(f"{source}: {what}; refit with `dkilab bench retrieval --train`")
        # a feature the model was not fitted with (a signal added since) gets zero weight, and the card says so
        self.unfitted = [f for f in FEATURES if f not in names]
        if self.unfitted:
            warnings.warn(f"{source} was not fitted with the features {', '.join(self.unfitted)}: they get zero "
                          "weight until it is refitted (`dkilab bench retrieval --train`)", stacklevel=2)
        # its columns: the built-in features, then the signals' it was fitted with (`columns_of`)
        self.columns: tuple[str, ...] = FEATURES + tuple(f for f in names if f not in FEATURES)
        self._warned: set[str] = set()
        at = np.array([self.columns.index(f) for f in names])
        models = data.get("models")
        if not isinstance(models, dict) or not models:
            raise ValueError(f"{source}: no 'models' (one per encoder family)")
        self.data = data
        self.parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for lang, part in models.items():
            try:
                mean, scale, coef = (np.asarray(part[k], dtype=np.float64) for k in ("mean", "scale", "coef"))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{source}: model {lang!r} is malformed ({exc})") from None
            if not (mean.shape == scale.shape == coef.shape == (len(names),)) or not np.all(scale > 0):
                raise ValueError(f"{source}: model {lang!r} needs mean, scale (> 0) and coef of {len(names)} numbers")
            full = np.zeros((3, len(self.columns)))
            full[1] = 1.0
            full[:, at] = (mean, scale, coef)
            self.parts[lang] = (full[0], full[1], full[2])
        self.default = str(data.get("default", next(iter(models))))
        if self.default not in self.parts:
            raise ValueError(f"{source}: default model {self.default!r} is not among {sorted(self.parts)}")
        self.version = str(data.get("version", "?"))
        self.guard = (RangeGuard.from_dict(data["guard"], source, names, self.columns) if data.get("guard") is not None
                      else None)
        weights = {k: {f: models[k][f] for f in ("mean", "scale", "coef")} for k in sorted(models)}
        # the cue rule picks the part, the date rules feed the date features, the guard may hand the order
        # back to the weighted fusion: each decides the ranking
        decides = {"features": names, "routing": ROUTING, "dates": DATE_RULES, "models": weights}
        if self.guard is not None:
            decides["guard"] = self.guard.to_dict()
        self.digest = hashlib.sha1(json.dumps(decides, sort_keys=True).encode()).hexdigest()[:12]

    def part_for(self, encoder: str | None, query: str) -> str:
        """Which part scores a query: the one fitted on the store's encoder family and the query's language
        (`e5:en`, `e5:zh`, `minilm:en`), else that family's part for any language; where the encoder is unknown
        (a memory over the recall service) e5's for Chinese and stock MiniLM's for English (`Embedder()`'s
        default); else the default part. The family decides first: cosines sit at its own levels.
        A conversational cue (`cue_kind`: a turn that is not a question) takes the family's `utterance` part
        (`minilm:utterance`, `e5:utterance`) where the model has one; a question never does."""
        lang = language(query)
        fam = family(encoder) or ("e5" if lang == "zh" else "minilm")
        keys = (f"{fam}:{UTTERANCE}",) if cue_kind(query) == UTTERANCE else ()
        for key in (*keys, f"{fam}:{lang}", fam):
            if key in self.parts:
                return key
        return next((k for k in self.parts if k.split(":")[0] == fam and not k.endswith(f":{UTTERANCE}")),
                    self.default)

    def columns_of(self, X: np.ndarray, columns: tuple[str, ...]) -> np.ndarray:
        """Feature rows whose columns are `columns` laid out as this model's: a signal's feature it was not
        fitted with is dropped (zero weight; said once per model and feature), one it was fitted with but
        switched off is NaN, which `score` reads as the part's mean (no contribution)."""
        if tuple(columns) == self.columns:
            return X
        new = [c for c in columns if c not in self.columns and c not in self._warned]
        if new:
            self._warned.update(new)
            warnings.warn(f"fusion model {self.version} was not fitted with the features {', '.join(new)}: they get "
                          "zero weight until it is refitted (`dkilab bench retrieval --train`)", stacklevel=2)
        at = {c: k for k, c in enumerate(columns)}
        out = np.full((len(X), len(self.columns)), np.nan)
        for j, c in enumerate(self.columns):
            if c in at:
                out[:, j] = X[:, at[c]]
        return out

    def score(self, X: np.ndarray, part: str) -> np.ndarray:
        """Scores of the rows of `X` (laid out by `columns_of`) by the model part `part` (else the default one)."""
        mean, scale, coef = self.parts.get(part) or self.parts[self.default]
        if np.isnan(X).any():  # a signal the model was fitted with, switched off
            X = np.where(np.isnan(X), mean, X)
        return ((X - mean) / scale) @ coef

    def card(self) -> dict[str, Any]:
        """What a cell records of the model: version, digest and what each part was trained on."""
        card = {"version": self.version, "digest": self.digest,
                "trained_on": {k: v.get("trained_on", "") for k, v in self.data["models"].items()}}
        return card | ({"unfitted_features": list(self.unfitted)} if self.unfitted else {})


@functools.lru_cache(maxsize=8)
def _load(path: str, stamp: tuple) -> FusionModel:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"fusion model {p}: {exc}") from None
    return FusionModel(data, str(p))


def load_model(path: str | Path | None = None) -> FusionModel:
    """The fusion model at `path` (default: the shipped one; a relative path from the working directory,
    else from the project root, where experiment configs name theirs), cached by path and modification time."""
    p = Path(path or DEFAULT_MODEL)
    if not p.is_absolute() and not p.is_file() and (ROOT / p).is_file():
        p = ROOT / p
    if not p.is_file():
        raise ValueError(f"fusion model {p}: no such file (train one with `dkilab bench retrieval --train`)")
    return _load(str(p.resolve()), stat_key(p))


def similarities(memory: Memory, query: str, ids: list[str], embedder=None) -> dict[str, float]:
    """The query's cosine with each message of `ids`: the memory's stored vectors where it exposes them,
    else one semantic search as wide as the tool allows (messages beyond it get its lowest score)."""
    if isinstance(memory, VectorMemory):
        embedder = embedder if embedder is not None else memory.embedder
        if embedder is not None:
            return memory.similarities(embedder.encode_query(query), ids)
    kwargs = {"query_embedding": embedder.encode_query(query)} if embedder is not None else {"query_text": query}
    got = {h.message.message_id: float(h.score or 0.0) for h in memory.semantic_search(top_k=WIDE, **kwargs).items}
    floor = min(got.values(), default=0.0)
    return {i: got.get(i, floor) for i in ids}


def _neighbours(memory: Memory, ranked: list[RecalledMessage], top: int
                ) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, Message]]:
    """({message id: (previous id, next id)} within its session, for every candidate and for the neighbours
    of the top `top` hits, which join the candidates; the messages read on the way): the memory's `adjacent`
    where it has one (the store: one lookup, two turns each way), else one `session_messages` read per
    session (a memory over the recall service)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    if isinstance(memory, VectorMemory):
        got = memory.adjacent([r.message.message_id for r in ranked], reach=2)
        for i, (p1, _, n1, _) in got.items():
            out[i] = (p1, n1)
        for r in ranked[:top]:  # a hit's neighbour lies between the hit and the turn two away
            p1, p2, n1, n2 = got.get(r.message.message_id, (None,) * 4)
            if p1 is not None and p1 not in out:
                out[p1] = (p2, r.message.message_id)
            if n1 is not None and n1 not in out:
                out[n1] = (r.message.message_id, n2)
        return out, {}
    read: dict[str, Message] = {}
    for sid in dict.fromkeys(r.message.session_id for r in ranked):
        msgs = memory.session_messages(sid)
        for k, m in enumerate(msgs):
            read[m.message_id] = m
            out[m.message_id] = (msgs[k - 1].message_id if k else None,
                                 msgs[k + 1].message_id if k + 1 < len(msgs) else None)
    return out, read


def _rank_of(values: dict[str, float], ids: list[str]) -> dict[str, int]:
    order = sorted(ids, key=lambda i: -values.get(i, 0.0))
    return {i: r for r, i in enumerate(order)}


def candidates(query: str, ranked: list[RecalledMessage], memory: Memory, *, keywords: list[tuple[str, float]],
               focus_role: str | None, asked_at=None, embedder=None, scope: dict[str, int] | None = None
               ) -> tuple[list[Message], np.ndarray]:
    """The candidates (fused list plus the neighbours of its top hits) and their feature rows (`FEATURES`).
    `scope`: the messages of the question's resolved reference scope (seed §2.2.2: 刚才 = the last 3 turns,
    最近 = 50, 那件事 = the last shared topic), each with its rank there, newest 0."""
    if not ranked:
        return [], np.zeros((0, len(FEATURES)))
    links, read = _neighbours(memory, ranked, NEIGHBOR_TOP)
    fused = {r.message.message_id: r.score for r in ranked}
    lex = {r.message.message_id: max(r.signals.get("keyword", 0.0), r.signals.get("keyword_unfocused", 0.0))
           for r in ranked}
    cands: dict[str, Message] = {r.message.message_id: r.message for r in ranked}
    for r in ranked[:NEIGHBOR_TOP]:
        for nid in links.get(r.message.message_id, (None, None)):
            if nid is not None and nid not in cands:
                cands[nid] = read.get(nid) or memory.get(nid)
    ids = list(cands)
    wanted = list(dict.fromkeys([*ids, *(n for i in ids for n in links.get(i, (None, None)) if n is not None)]))
    cos = similarities(memory, query, wanted, embedder)
    top_f = max(fused.values()) or 1.0
    top_l = max(lex.values()) or 1.0
    top_c = max(cos[i] for i in ids)
    f_rank = {r.message.message_id: k for k, r in enumerate(ranked)}
    c_rank, l_rank = _rank_of(cos, ids), _rank_of(lex, ids)
    session_best: dict[str, float] = {}
    session_hits: dict[str, int] = {}
    for r in ranked[:SESSION_TOP]:
        s = r.message.session_id
        session_best[s] = max(session_best.get(s, 0.0), r.score / top_f)
        session_hits[s] = session_hits.get(s, 0) + 1
    session_rank = {s: k for k, s in enumerate(sorted(session_best, key=lambda s: -session_best[s]))}
    window = date_window(query, to_utc(asked_at) if asked_at is not None else max(m.timestamp for m in cands.values()))
    lo, hi = (to_utc(window[0]), to_utc(window[1])) if window is not None else (None, None)
    words = [k for k, _ in keywords]
    rows = []
    for i in ids:
        m = cands[i]
        prev, nxt = links.get(i, (None, None))
        c, pc, nc = cos[i], cos.get(prev, cos[i]) if prev else cos[i], cos.get(nxt, cos[i]) if nxt else cos[i]
        text = m.content.lower()
        if lo is None or hi is None:
            temporal = [0.0, 0.0, 0.0]
        else:
            inside = lo <= m.timestamp < hi
            off = 0 if inside else min(abs((m.timestamp - lo).days), abs((m.timestamp - hi).days))
            temporal = [1.0, float(inside), math.log1p(off)]
        rows.append([
            fused.get(i, 0.0) / top_f, math.log1p(f_rank.get(i, len(ranked))), c, c - top_c, math.log1p(c_rank[i]),
            lex.get(i, 0.0) / top_l, math.log1p(l_rank[i] if lex.get(i, 0.0) > 0 else len(ids)),
            0.0 if focus_role is None else (1.0 if m.role == focus_role else -1.0),
            float(m.content.rstrip().endswith(("?", "？"))), float(len(m.content)),
            fused.get(prev, 0.0) / top_f if prev else 0.0, pc, lex.get(prev, 0.0) / top_l if prev else 0.0,
            fused.get(nxt, 0.0) / top_f if nxt else 0.0, nc, lex.get(nxt, 0.0) / top_l if nxt else 0.0,
            max(c, pc), max(c, nc),
            session_best.get(m.session_id, 0.0), math.log1p(session_rank.get(m.session_id, SESSION_TOP)),
            float(session_hits.get(m.session_id, 0)),
            sum(1 for w in words if w in text) / len(words) if words else 0.0,
            *temporal, 0.0, 0.0, 0.0, 0.0, 0.0,
            *((1.0, math.log1p(scope[i])) if scope and i in scope else (0.0, 0.0))])
    X = np.asarray(rows, dtype=np.float64)
    col = {n: k for k, n in enumerate(FEATURES)}
    chars = X[:, col["chars_share"]]
    X[:, col["chars_share"]] = np.searchsorted(np.sort(chars), chars, side="left") / len(chars)
    for z, src in _Z.items():
        v = X[:, col[src]]
        X[:, col[z]] = (v - v.mean()) / (v.std() + 1e-6)
    return [cands[i] for i in ids], X


def with_signals(X: np.ndarray, messages: list[Message], query: str, signals: dict[str, Any],
                 lists: dict[str, list[tuple[Message, float]]]) -> tuple[np.ndarray, tuple[str, ...]]:
    """The feature rows with the switched-on recall signals' declared features after the built-in ones, and
    the names of their columns."""
    columns = FEATURES
    for name, signal in signals.items():
        scores = {m.message_id: s for m, s in lists.get(name, [])}
        X = np.hstack([X, signal.feature_rows(query, messages, scores)])
        columns += signal.feature_names()
    return X, columns


def cue_kind(query: str) -> str:
    """`question` or `utterance`: what recall is asked with. A question asks for something: it holds a "?" or
    "？" anywhere; or a Chinese clause in it ends in 吗 ("你还记得我说的那家店吗"; an embedded 什么 or a final 呢
    is not enough: "我什么都不怕呢"); or it does not end with "!" and starts like an English question, with a
    question word ("How many months passed between ...", not "What a day.") or an auxiliary before its subject
    ("Did Caroline go ...", "Have you ...", "Isn't it ..."; not "Have a great day", "Had the best time", "Will
    do"). Any other turn ("I'm really looking forward to that evening!") is a conversational cue, for which the
    memories related to it are wanted (MADial-Bench's task), and the signals weigh differently there. Only a
    turn that asks nothing is a cue: a question after chatter (MemDaily's noisy questions) stays a question, and
    so does a cue that asks the assistant something ("I practise every day. How should I celebrate?"). The rule
    is part of every recalling cell's identity (`ROUTING`, in `FusionModel.digest`): change it, bump that."""
    if "?" in query or "？" in query:
        return QUESTION
    text = query.strip().lstrip(_CLOSERS + " \t\n")
    if _ZH_ASKS.search(text):
        return QUESTION
    if text.endswith(("!", "！")):  # "How lovely!", "Have a great day!", "Did it!"
        return UTTERANCE
    if _WH.match(text):
        return QUESTION
    aux = _AUX.match(text)
    if aux is None:
        return UTTERANCE
    verb, word = aux.group(1).lower(), aux.group(2)
    if word.lower() in _SUBJECTS or (word[:1].isupper() and word[1:2].islower()):  # "Have you", "Did Caroline"
        return QUESTION
    return QUESTION if word.lower() in _DETERMINERS and verb not in ("have", "has", "had") else UTTERANCE


def language(query: str) -> str:
    """`zh` or `en`: the query's language."""
    return "zh" if detect_language(query) == "cn" else "en"


def family(encoder: str | None) -> str | None:
    """The fusion model part of a store's encoder: `minilm` (any build of stock MiniLM's weights),
    `minilm-locomo` (MiniLM fine-tuned on LoCoMo dev: its cosines sit at other levels, and its LoCoMo part is
    fitted out of fold), `e5`, else the name itself."""
    if encoder is None:
        return None

    if encoder == LOCOMO_EMBEDDER:
        return "minilm-locomo"
    return "minilm" if encoder in MINILM_BUILDS else "e5" if encoder == E5_EMBEDDER else encoder


def rerank(model: FusionModel, messages: list[Message], X: np.ndarray, ranked: list[RecalledMessage], part: str
           ) -> list[RecalledMessage]:
    """The candidates ordered by the model part's score (ties: the fused order, then time); each keeps the
    signals that found it and gets `learned` (its score) beside them."""
    if not messages:
        return []
    scores = model.score(X, part)
    by_id = {r.message.message_id: r for r in ranked}
    order = {r.message.message_id: k for k, r in enumerate(ranked)}
    out = []
    for m, s in zip(messages, scores):
        r = by_id.get(m.message_id)
        signals = dict(r.signals) if r is not None else {"neighbor": 0.0}
        signals["learned"] = float(s)
        out.append(RecalledMessage(m, float(s), signals))
    out.sort(key=lambda r: (-r.score, order.get(r.message.message_id, len(order)), r.message.timestamp))
    return out
