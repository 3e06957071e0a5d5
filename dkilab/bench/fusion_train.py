"""Fit the learned fusion's weights on the declared dev split only: LoCoMo conversations 0-4
(categories 1-4), the first half of MemDaily's first 300 trajectories (`experiments/retrieval_tune_dev.yaml`'s
data), the first half of MADial-Bench's dialogues in each language (80 each) and the generated work sessions'
users 0-11 (long user-assistant sessions, English). Each dev question is
recalled as `fusion: learned` recalls it, and the feature rows of its candidates
(`recall/learned.candidates`, the same code recall runs) are labelled by the gold evidence. One standardised
logistic regression per encoder family: `minilm` from LoCoMo dev on the MiniLM stores `auto` gives it (the
fine-tuned `offline:minilm-locomo`, trained on those very questions: so that part is not fitted here but taken
from its study, which fitted it out of fold, together with the work sessions' dev rows, `FITTED_OUT_OF_FOLD`;
`--english offline:minilm` fits it here on stock-MiniLM stores), `e5` from MemDaily dev (e5, as `auto` picks), so
English asked of an e5 store (the bilingual fixtures) is ranked by the Chinese-fitted part. MADial-Bench's cues are
conversational turns, not questions (`learned.cue_kind`): they fit each family's `utterance` part
(`minilm:utterance` from English, `e5:utterance` from Chinese), which ranks such cues only. `english_e5=True`
(`--english-e5-part`) also fits one on LoCoMo dev over e5 stores (`EXTRA`), and a family with parts in two languages
names them `e5:en`, `e5:zh`; it ships as an ablation model (`experiments/models/fusion_lr_e5_english.json`), not as
the default: it won LoCoMo test but lost MADial-Bench en (`dkilab bench retrieval`, docs/retrieval.md). A dataset
counts in the language of most of its questions; a language with fewer than `MIN_PART` questions of a family joins
that family's largest part. Each part's C is chosen by 5-fold cross-validation over conversations (users) on the dev
split, on the mean of its recall@10 and NDCG@10: the most regularised C within one standard error of the best
(`one_standard_error`). The held-back data (`dkilab bench retrieval`) is never read here.

    dkilab bench retrieval --train [--data-dir DIR]     writes dkilab/recall/fusion_lr.json
    ... --train --no-cue-parts --out F                  the ablation model without the cue parts (`parts`)
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dkilab.cache import cache_dir
from dkilab.encoders.embedder import LOCOMO_EMBEDDER, weights_digest
from dkilab.eval.data import dataset_info, source_digest
from dkilab.eval.harness.cell import load_cell_data, question_text
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict
from dkilab.eval.scoring.retrieval import evidence_recall, ndcg
from dkilab.recall import config, learned, multi_signal
from dkilab.recall.learned import QUESTION
from dkilab.recall.multi_signal import MultiSignalRecall

DEV: list[dict[str, Any]] = [{"name": "locomo", "categories": [1, 2, 3, 4], "split": "dev"},
                             {"name": "memdaily", "limit": 300, "split": "dev"},
       {"name": "madial_bench_en", "split": "dev"}, {"name": "madial_bench_zh", "split": "dev"},
       {"name": "worksessions", "split": "dev"}]
# the dev data collected again on another encoder's stores, for a part `auto` does not give (`english_e5`)
EXTRA = [({"model": "offline:e5"}, [{"name": "locomo", "categories": [1, 2, 3, 4], "split": "dev"}])]
CS = (0.01, 0.1, 1.0)
FOLDS = 5
MIN_PART = 100  # questions of one family and language below which they join the family's largest part
MIN_CUES = 50  # conversational cues of one family below which they join its question parts
STOCK = {"model": "auto", "english": "offline:minilm"}  # stock MiniLM for English, the encoder of `Embedder()`
# encoders fine-tuned on a dev dataset's questions: their cosines on that dataset's dev questions are in-sample
# (too good), so `train` never fits a part on them; it takes the part the encoder's study fitted out of fold on
# them (`experiments/bench/finetune_encoder_dev.py --write`), checked against the adapter's digest
FITTED_OUT_OF_FOLD = {"offline:minilm-locomo": ("locomo", "experiments/models/fusion_lr_minilm_locomo.json")}


def _fine_tuned_on(model: str, dataset: str) -> bool:
    """Whether `model` was fine-tuned on `dataset`'s dev questions (`FITTED_OUT_OF_FOLD`)."""
    return FITTED_OUT_OF_FOLD.get(model, ("",))[0] == dataset


def _cells(embedder: dict | None = None, datasets: list[dict] | None = None):
    cfg = experiment_from_dict({"name": "fusion-train", "datasets": datasets or DEV, "tracing": False,
                                "purpose": "tune", "embedder": embedder or {"model": "auto"},
                                # weighted here so the cells build without a model; collect() switches to learned
                                "strategies": [{"name": "recall_only", "label": "learned",
                                                "params": {"recall": {"signals": {"fusion": "weighted"}}}}]},
                               "<fusion training>")
    return expand_cells(cfg)


def collect(data_dir=None, embedder: dict | None = None, datasets: list[dict] | None = None,
            recall: dict[str, Any] | None = None, stand_ins: bool = False) -> list[dict[str, Any]]:
    """[{dataset, user, qid, ids, X, gold, index_text}] for every question with evidence of `datasets`
    (default: the dev split, `DEV`); `recall`: dotted-key updates of the recall config (a study of another
    candidate list, e.g. {"signals.vector_top_k": 200}). `stand_ins` (`train`): a cell whose encoder was
    fine-tuned on its dataset (`FITTED_OUT_OF_FOLD`) is neither built nor recalled; one row without features
    ({dataset, model, index_text, stand_in}) stands for it, for `_out_of_fold_parts` to borrow its part."""
    n = len(learned.FEATURES)
    zero = {"version": "zero", "features": list(learned.FEATURES),
            "models": {"any": {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.0] * n}}}
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dkilab-fusion-") as tmp:
        path = Path(tmp) / "zero.json"  # any model serves: the features are read before it scores
        path.write_text(json.dumps(zero))
        for cell in _cells(embedder, datasets):
            if stand_ins and _fine_tuned_on(cell.embedder.model, cell.dataset.name):
                out.append({"dataset": cell.dataset.name, "model": cell.embedder.model, "stand_in": True,
                            "index_text": cell.embedder.index_text, "family": learned.family(cell.embedder.model)})
                continue
            cfg = cell.params.recall.with_updates({**(recall or {}), "signals.fusion": "learned",
                                                   "signals.fusion_model": str(path)})
            data = load_cell_data(cell, data_dir)
            resolver = cell.instance.resolver  # the strategy's own resolver, as recall_only builds it
            views: dict[str, Any] = {}
            for conv, item in data.items:
                if not item.evidence_ids:
                    continue
                memory = views.setdefault(conv.user_id, data.store.for_user(conv.user_id))
                msr = MultiSignalRecall(cfg, resolver, memory)
                got: dict[str, Any] = {}
                msr.on_candidates = lambda msgs, X, got=got: got.update(ids=[m.message_id for m in msgs], X=X)
                msr.recall(question_text(item), session_id=item.session_id, max_results=20, asked_at=item.question_date)
                if got:
                    out.append({"dataset": cell.dataset.name, "user": conv.user_id, "qid": item.qid, "ids": got["ids"],
                                "X": got["X"], "gold": set(item.evidence_ids), "index_text": cell.embedder.index_text,
                                "family": learned.family(cell.embedder.model), "model": cell.embedder.model,
                                "language": learned.language(question_text(item)), "query": question_text(item),
                                "kind": learned.cue_kind(question_text(item))})
    return out


def _cache_key(parts: list[Any]) -> str:
    code = "".join(Path(str(m.__file__)).read_text(encoding="utf-8") for m in (learned, multi_signal, config))
    blob = json.dumps([parts, code, weights_digest(LOCOMO_EMBEDDER)], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def collected(data_dir, embedder: dict, spec: dict, echo=print, **kw: Any) -> list[dict[str, Any]]:
    """`collect` of one dataset spec on `embedder`'s stores, cached under the cache dir by the recall code
    (its config's defaults included), the adapter, the spec and the digest of the dataset's files (a file
    edited under the same name is collected again); a cache file that cannot be read is collected again,
    with a line saying so. `--train` and `--leave-one-dataset-out` share it."""
    digest = source_digest(str(spec["name"]), data=data_dir)
    path = cache_dir() / "features" / f"{spec['name']}-{_cache_key([spec, embedder, kw, str(data_dir), digest])}.pkl"
    if path.is_file():
        try:
            return pickle.loads(path.read_bytes())
        except Exception as exc:  # a truncated or foreign file: the features are collected again
            echo(f"{path}: unreadable ({type(exc).__name__}: {exc}); collecting its features again")
    rows = collect(data_dir, embedder, [spec], **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(rows))
    tmp.replace(path)
    return rows


def _majority(rows: list[dict[str, Any]], key: str, default: str) -> dict[str, str]:
    """{dataset: the value of `key` most of its rows have}."""
    votes: dict[str, dict[str, int]] = {}
    for r in rows:
        v = votes.setdefault(r["dataset"], {})
        v[r.get(key, default)] = v.get(r.get(key, default), 0) + 1
    return {ds: max(sorted(v), key=lambda k: v[k]) for ds, v in votes.items()}


def parts(rows: list[dict[str, Any]], min_questions: int = MIN_PART, min_cues: int = MIN_CUES,
          cue_parts: bool = True) -> dict[str, list[dict[str, Any]]]:
    """{part name: its rows}: one per encoder family, or per family and language (`e5:en`, `e5:zh`) where a
    family has at least `min_questions` questions in two languages. A dataset counts in the language of most
    of its questions (a stray English-looking MemDaily question stays with its dataset); a smaller language
    joins its family's largest part. A dataset whose questions are mostly conversational cues
    (`learned.cue_kind`: MADial-Bench) fits its family's `utterance` part (`minilm:utterance`), any language,
    where the family has at least `min_cues` of them; else it joins the question parts. `cue_parts=False`:
    the datasets that would fit a cue part are left out, so the question parts are what they are beside it."""
    kind_of = _majority(rows, "kind", QUESTION)
    cues: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if kind_of[r["dataset"]] != QUESTION:
            cues.setdefault(r["family"], []).append(r)
    cues = {fam: g for fam, g in cues.items() if len(g) >= min_cues}
    if not cue_parts:
        rows = [r for r in rows if not (kind_of[r["dataset"]] != QUESTION and r["family"] in cues)]
        cues = {}
    lang_of = _majority(rows, "language", "en")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if not (kind_of[r["dataset"]] != QUESTION and r["family"] in cues):
            groups.setdefault((r["family"], lang_of[r["dataset"]]), []).append(r)
    out: dict[str, list[dict[str, Any]]] = {}
    for fam in dict.fromkeys(f for f, _ in groups):
        mine = sorted(((lang, g) for (f, lang), g in groups.items() if f == fam), key=lambda x: -len(x[1]))
        big = [(lang, g) for lang, g in mine if len(g) >= min_questions]
        if len(big) < 2:
            out[fam] = [r for _, g in mine for r in g]
            continue
        for lang, g in big:
            out[f"{fam}:{lang}"] = list(g)
        out[f"{fam}:{big[0][0]}"] += [r for lang, g in mine if len(g) < min_questions for r in g]
    for fam, g in cues.items():
        out[f"{fam}:utterance"] = g
    return out


def _fit(rows: list[dict[str, Any]], C: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X = np.concatenate([r["X"] for r in rows])
    y = np.concatenate([[i in r["gold"] for i in r["ids"]] for r in rows])
    per_ds: dict[str, int] = {}
    for r in rows:
        per_ds[r["dataset"]] = per_ds.get(r["dataset"], 0) + len(r["ids"])
    w = np.concatenate([np.full(len(r["ids"]), 1.0 / per_ds[r["dataset"]]) for r in rows]) * len(y) / len(per_ds)
    scaler = StandardScaler().fit(X)
    lr = LogisticRegression(C=C, max_iter=5000).fit(scaler.transform(X), y, sample_weight=w)
    return scaler, lr


def _score(rows, scaler, lr) -> dict[str, float]:
    """Mean LoCoMo recall@10 and MemDaily NDCG@10 of the fitted model over `rows`."""
    by: dict[str, list[float]] = {}
    for r in rows:
        s = lr.decision_function(scaler.transform(r["X"]))
        ranked = [r["ids"][k] for k in np.argsort(-s, kind="stable")]
        gold = list(r["gold"])
        by.setdefault(f"{r['dataset']} recall@10", []).append(evidence_recall(ranked, gold, 10))
        by.setdefault(f"{r['dataset']} ndcg@10", []).append(ndcg(ranked, gold, 10))
    return {k: float(np.mean(v)) for k, v in by.items()}


def _objective(figures: dict[str, float]) -> float:
    """The mean of recall@10 and NDCG@10 over the datasets in `figures`."""
    return float(np.mean([v for k, v in figures.items() if k.endswith(("recall@10", "ndcg@10"))]))


def fold_figures(rows, C: float, folds: int = FOLDS) -> list[tuple[int, dict[str, float]]]:
    """Each fold's (question count, figures) of `C` over `folds` folds of users (each dataset's users dealt
    round-robin)."""
    users = sorted({(r["dataset"], r["user"]) for r in rows})
    fold = {u: k % folds for k, u in enumerate(users)}
    out = []
    for k in range(folds):
        train = [r for r in rows if fold[(r["dataset"], r["user"])] != k]
        held = [r for r in rows if fold[(r["dataset"], r["user"])] == k]
        if held and train:
            out.append((len(held), _score(held, *_fit(train, C))))
    return out


def _pool(folds: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """The folds' figures, each weighted by its question count."""
    names = {k for _, fig in folds for k in fig}
    return {k: sum(n * fig[k] for n, fig in folds if k in fig) / sum(n for n, fig in folds if k in fig)
            for k in sorted(names)}


def cross_validate(rows, C: float, folds: int = FOLDS) -> dict[str, float]:
    """Figures of `C` over `folds` folds of users (each dataset's users dealt round-robin)."""
    return _pool(fold_figures(rows, C, folds))


class Choice(NamedTuple):
    """`choose_c`'s answer: the chosen C, every C's cross-validated figures, the C with the best objective and
    the standard error of that objective over the folds."""
    C: float
    cv: dict[float, dict[str, float]]
    best: float
    se: float

    def line(self) -> str:
        why = "the best" if self.C == self.best else (
            f"the most regularised within one standard error ({self.se:.3f}) of C={self.best}'s "
            f"{_objective(self.cv[self.best]):.3f}")
        return f"C={self.C} (cross-validated objective {_objective(self.cv[self.C]):.3f}, {why})"


def one_standard_error(objectives: dict[float, float], best_folds: list[float]) -> tuple[float, float, float]:
    """(chosen C, best C, standard error): the smallest C (the strongest regularisation) whose objective is
    within one standard error of the best's, the error taken over the best C's folds. Near-ties go to the
    simpler model: a C chosen by a margin the folds cannot resolve transferred worse to data not fitted on
    (docs/retrieval.md, "How C is chosen")."""
    best = max(objectives, key=lambda C: objectives[C])
    se = float(np.std(best_folds, ddof=1) / np.sqrt(len(best_folds))) if len(best_folds) > 1 else 0.0
    return min(C for C, v in objectives.items() if v >= objectives[best] - se), best, se


C_RULES = ("one_se", "best")  # how `choose_c` picks C; the first ships (experiments/bench/c_rule_dev.py)


def choose_c(rows, rule: str = C_RULES[0]) -> Choice:
    """The C of `CS` chosen on `rows`' cross-validated `_objective` by `rule` (`one_se`: the one-standard-error
    rule; `best`: the highest objective), and every C's figures."""
    if rule not in C_RULES:
        raise ValueError(f"fusion training: unknown C rule {rule!r}: one of {', '.join(C_RULES)}")
    folds = {C: fold_figures(rows, C) for C in CS}
    cv = {C: _pool(f) for C, f in folds.items()}
    top = max(CS, key=lambda C: _objective(cv[C]))
    chosen, best, se = one_standard_error({C: _objective(cv[C]) for C in CS},
                                          [_objective(fig) for _, fig in folds[top]])
    return Choice(chosen if rule == "one_se" else best, cv, best, se)


def _out_of_fold_parts(rows: list[dict[str, Any]], echo=print) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`rows` without those of an encoder fine-tuned on their dev dataset (`FITTED_OUT_OF_FOLD`; `collect`'s
    stand-ins for such cells among them), and the parts that stand in for them: the question part its study
    fitted out of fold, which must have been fitted for the adapter that is here now (same digest), else an
    error that says how to refit it."""
    keep, parts = [], {}
    for r in rows:
        if not _fine_tuned_on(r.get("model", ""), r["dataset"]):
            keep.append(r)
            continue
        dataset, path = FITTED_OUT_OF_FOLD[r["model"]]
        fam = learned.family(r["model"]) or r["model"]
        if fam in parts:
            continue
        file = learned.ROOT / path
        try:
            part = json.loads(file.read_text(encoding="utf-8"))["models"][fam]
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"fusion training: {r['model']} was fine-tuned on {dataset} dev, so its part is fitted "
                             f"out of fold by experiments/bench/finetune_encoder_dev.py --write; {file} has no "
                             f"'{fam}' part ({exc})") from None
        if str(part.get("index_text")) != str(r["index_text"]):
            raise ValueError(f"fusion training: the '{fam}' part of {file} was fitted on other stores (index text "
                             f"v{part.get('index_text')}) than these (index text v{r['index_text']})")
        if part.get("adapter") != weights_digest(r["model"]):
            raise ValueError(f"fusion training: the '{fam}' part of {file} was fitted for adapter "
                             f"{part.get('adapter')}, not the one here ({weights_digest(r['model'])}): rerun "
                             "experiments/bench/finetune_encoder_dev.py --write")
        parts[fam] = part
        echo(f"{fam}: {r['model']} was fine-tuned on {dataset} dev, so not refitted on it: the out-of-fold part "
             f"of {path} ({part.get('trained_on')})")
    return keep, parts


def default_part(models: dict[str, Any]) -> str:
    """The part that ranks for an encoder of no known family: stock MiniLM's where fitted, else a MiniLM
    question part, else the first."""
    return "minilm" if "minilm" in models else next(
        (k for k in models if k.startswith("minilm") and not k.endswith(":utterance")), next(iter(models)))


def for_spec(embedder: dict[str, Any], spec: dict[str, Any], turn_alone: bool = False) -> dict[str, Any]:
    """`embedder` for the stores of dataset `spec`; `turn_alone`: an English dataset's stores embed each turn
    alone (index text v1, `with_previous_turn: false`); other languages keep the default (e5 stores always
    embed a turn with the one it replies to)."""
    if turn_alone and dataset_info(str(spec["name"]))["language"] == "en":
        return {**embedder, "with_previous_turn": False}
    return embedder


def train(data_dir=None, out: Path | None = None, echo=print, turn_alone: bool = False,
          datasets: list[dict] | None = None, english_e5: bool = False, cue_parts: bool = True,
          english: str | None = None, guard: bool = True) -> dict[str, Any]:
    """Collect the dev features, choose each encoder family's C by cross-validation, fit it on all of its dev
    data, write the model. `turn_alone` (`--turn-alone`): the English data on stores that embed each turn
    alone (`for_spec`; the `turn_alone` ablation row of `experiments/retrieval_bench.yaml`); else every
    dataset on its encoder's default stores (`encoders.embedder.index_text_for`). `datasets` defaults to the
    dev split (`DEV`); each encoder family found there gets its part (`parts`). `english_e5`: also LoCoMo dev
    over e5 stores (`EXTRA`), for the `e5:en` part of the ablation model. `cue_parts=False` (`--no-cue-parts`):
    leave out the datasets of conversational cues (MADial-Bench dev), so the model has its question parts only
    and ranks a cue with them, as before the cue parts (the ablation model
    `experiments/models/fusion_lr_no_cue_parts.json`). `english` (`--english`): the encoder `auto` gives English
    data instead of the default (offline:minilm: the stock-MiniLM ablation models). The dev rows of an encoder
    fine-tuned on them are never fitted on (`FITTED_OUT_OF_FOLD`). `guard` (the default; `--no-guard` leaves it
    out): the model carries the range guard of every dev row it was fitted on (`learned.RangeGuard`), which won
    `dkilab bench retrieval --leave-one-dataset-out`."""
    wanted: list[dict[str, Any]] = datasets or DEV
    auto = {"model": "auto", "english": english}
    rows = [r for spec in wanted for r in collected(data_dir, for_spec(auto, spec, turn_alone), spec, echo,
                                                    stand_ins=True)]
    if english is None:  # the English dev data again on stock-MiniLM stores: its parts serve `Embedder()`'s stores

        rows += [r for spec in wanted if dataset_info(str(spec["name"]))["language"] == "en"
                 for r in collected(data_dir, for_spec(STOCK, spec, turn_alone), spec, echo)]
    if english_e5:
        for embedder, extra in EXTRA:
            rows += [r for spec in extra for r in collected(data_dir, for_spec(embedder, spec, turn_alone), spec, echo)]
    if not rows:
        raise ValueError("fusion training: no question with evidence (is $DKILAB_DATA_DIR set?)")
    rows, models = _out_of_fold_parts(rows, echo)
    for part, mine in parts(rows, cue_parts=cue_parts).items():
        names = ", ".join(dict.fromkeys(r["dataset"] for r in mine))
        if part in models:  # its study fitted it on these datasets' rows too (and on the out-of-fold ones)
            if not {r["dataset"] for r in mine} <= set(models[part].get("datasets", ())):
                raise ValueError(f"fusion training: part {part!r} would be fitted on dev data ({names}) besides "
                                 f"its study's fit ({models[part].get('trained_on')})")
            echo(f"{part}: {names} dev are in its study's fit too")
            continue
        choice = choose_c(mine)
        best, cv = choice.C, choice.cv
        echo(f"{part} ({names}, {len(mine)} questions):")
        for C, fig in cv.items():
            echo(f"  C={C:<5} cross-validated: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(fig.items())))
        scaler, lr = _fit(mine, best)
        models[part] = {"mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(), "coef": lr.coef_[0].tolist(),
                        "intercept": float(lr.intercept_[0]), "C": best, "questions": len(mine),
                        "trained_on": f"{names} ({len(mine)} questions), index text v{mine[0]['index_text']}",
                        "cross_validated": {k: round(v, 4) for k, v in cv[best].items()}}
        top = sorted(zip(learned.FEATURES, models[part]["coef"]), key=lambda x: -abs(x[1]))[:6]
        echo(f"  chose {choice.line()}; heaviest: " + ", ".join(f"{n} {c:+.2f}" for n, c in top))
    model: dict[str, Any] = {"version": "lr2", "features": list(learned.FEATURES), "default": default_part(models),
                             "models": models}
    if guard:  # the range of every row fitted on: a question outside it gets the weighted order (RangeGuard)
        fitted = learned.RangeGuard.fit([r["X"] for r in rows])
        model["guard"] = fitted.to_dict()
        echo(f"guard: the ranges of {len(rows)} questions' candidates, limit {fitted.limit:.4f}")
    path = out or learned.DEFAULT_MODEL
    path.write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    echo(f"wrote {path}")
    return model
