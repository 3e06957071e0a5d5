"""Two vectors per message (issue 59): each turn embedded alone *and* with the turn it replies to, on dev rows only.

Stores embed each turn with the one it replies to (held-out figures chose it over the turn alone,
docs/retrieval.md). A store could keep both vectors: the dense search would then find a turn through either,
and the learned fusion would read both cosines. This study measures both halves of that on the dev rows that
`dkilab bench retrieval --leave-one-dataset-out` collects (and caches), with the encoder each row's store used:

- **ranking**: each candidate's cosine with the turn alone (`alone_cos`, and its z-score over the question's
  candidates, `z_alone_cos`) joins the feature rows; for each dev source in turn the shipped structure
  (`fusion_train.parts`, C by the shipped rule) is fitted on the *other* sources' dev rows with and without the
  two columns and scores the held-out source's dev rows;
- **candidates**: of the evidence the candidate list missed, how much a second search over the vectors of each
  turn alone would have brought in (within its top `vector_top_k` over the user's messages): the most a
  second index could add before ranking;
- **ingest**: messages embedded per second with the turn before, alone, and both (what two vectors cost).

    python experiments/bench/two_vectors_dev.py [--data-dir DIR]

A dev study (`purpose: tune` data only); test splits are never read. What it prints is what
docs/retrieval.md quotes.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from dkilab.bench import lodo
from dkilab.bench.fusion_train import default_part, parts
from dkilab.encoders.embedder import Embedder
from dkilab.eval.data import load_dataset
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.bootstrap import paired
from dkilab.memory.store import index_text
from dkilab.recall import learned
from dkilab.recall.config import RecallConfig

EXTRA = ("alone_cos", "z_alone_cos")
METRICS3 = ("recall_at_10", "ndcg_at_10", "mrr")


def messages(datasets: set[str], data_dir) -> tuple[dict, dict[str, list[str]]]:
    """({"dataset/message id": Message}, {"dataset/user": their keys}) of every conversation of `datasets`."""
    by_id, by_user = {}, {}
    for name in sorted(datasets):
        for conv in load_dataset(name, data_dir):
            for m in conv.messages:
                by_id[f"{name}/{m.message_id}"] = m
                by_user.setdefault(f"{name}/{conv.user_id}", []).append(f"{name}/{m.message_id}")
    return by_id, by_user


def alone_vectors(rows: list[dict], by_id: dict, by_user: dict, echo=print) -> dict[str, dict[str, np.ndarray]]:
    """{encoder: {"dataset/message id": its vector of the turn alone}} for every message of the rows' users, by the
    encoder of each row's store."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        ids = list(dict.fromkeys(i for r in rows if r["model"] == model
                                 for i in by_user[f"{r['dataset']}/{r['user']}"]))
        t = time.perf_counter()
        vecs = Embedder(model).encode([index_text(by_id[i], version="1") for i in ids])
        echo(f"  {model}: {len(ids)} messages embedded alone in {time.perf_counter() - t:.0f} s")
        out[model] = dict(zip(ids, vecs))
    return out


def widened(rows: list[dict], alone: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """`rows` with `EXTRA` appended to each feature row, and each row's query vector (`qvec`)."""
    encoders = {m: Embedder(m) for m in alone}
    out = []
    for r in rows:
        q = encoders[r["model"]].encode_query(r["query"])
        cos = np.array([float(alone[r["model"]][f"{r['dataset']}/{i}"] @ q) for i in r["ids"]])
        z = (cos - cos.mean()) / (cos.std() + 1e-6)
        out.append({**r, "X": np.column_stack([r["X"], cos, z]), "qvec": q})
    return out


class Wide:
    """The shipped structure (`fusion_train.parts`, C by `rule`) fitted on `train` over the first `width` feature
    columns: `lodo.fit_parts` for columns no recall signal declares, which `learned.FusionModel` refuses."""
    def __init__(self, train: list[dict], width: int, rule: str):

        self.width = width
        cut = [{**r, "X": r["X"][:, :width]} for r in train]
        self.fitted = {name: lodo._fit_best(mine, lambda _: None, name, rule) for name, mine in parts(cut).items()}
        n = len(learned.FEATURES)  # zero weights: it routes a question to its part as the shipped model would
        self.router = learned.FusionModel({"features": list(learned.FEATURES), "default": default_part(self.fitted),
                                           "models": {k: {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.0] * n}
                                                      for k in self.fitted}})

    def part_for(self, encoder: str, query: str) -> str:
        return self.router.part_for(encoder, query)

    def score(self, X: np.ndarray, part: str) -> np.ndarray:
        scaler, lr = self.fitted[part]
        return lr.decision_function(scaler.transform(X[:, :self.width]))


def missed(rows: list[dict], alone: dict, by_user: dict, top_k: int) -> dict[str, tuple[int, int, int]]:
    """{dev dataset (encoder): (evidence ids, those not among the candidates, those of them within the top
    `top_k` of a search over the vectors of each turn alone)}."""
    out: dict[str, list[int]] = {}
    for r in rows:
        ids = by_user[f"{r['dataset']}/{r['user']}"]
        sims = np.array([alone[r["model"]][i] for i in ids]) @ r["qvec"]
        top = {ids[k] for k in np.argsort(-sims, kind="stable")[:top_k]}
        gone = [f"{r['dataset']}/{g}" for g in r["gold"] if g not in set(r["ids"])]
        c = out.setdefault(f"{r['dataset']} ({r['model'].split(':')[-1]})", [0, 0, 0])
        c[0] += len(r["gold"])
        c[1] += len(gone)
        c[2] += sum(g in top for g in gone)
    return {k: (a, b, c) for k, (a, b, c) in out.items()}


def ingest(by_id: dict, n: int = 2000) -> list[str]:
    """Messages embedded per second by stock MiniLM with the turn before, alone and both, on the first `n`
    messages of the dev data (the same texts each way)."""
    msgs = list(by_id.values())[:n]
    prev = {m.message_id: p for p, m in zip([None, *msgs], msgs) if p is not None and p.session_id == m.session_id}
    enc = Embedder("offline:minilm")
    enc.encode(["warm up"])
    rates = {}
    for name, texts in (("with the turn before", [index_text(m, prev.get(m.message_id)) for m in msgs]),
                        ("alone", [index_text(m, version="1") for m in msgs])):
        t = time.perf_counter()
        enc.encode(texts)
        rates[name] = len(msgs) / (time.perf_counter() - t)
    both = 1 / (1 / rates["with the turn before"] + 1 / rates["alone"])
    return [f"  {k}: {v:.0f} messages/s" for k, v in rates.items()] + [
        f"  both (two vectors): {both:.0f} messages/s, {rates['with the turn before'] / both:.2f}x the time of one"]


def main() -> None:

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    dev, _ = lodo.collect_all(args.data_dir, echo=lambda _: None)
    by_id, by_user = messages({r["dataset"] for r in dev}, args.data_dir)
    print("dev rows only; each turn's vector of the turn alone, by its store's encoder:")
    alone = alone_vectors(dev, by_id, by_user)
    rows = widened(dev, alone)
    n = len(learned.FEATURES)
    held = {name: lodo.dev_held_out_rows(rows, fit=lambda train, _echo, rule, w=w: Wide(train, w, rule))
            for name, w in (("one vector", n), ("two vectors", n + len(EXTRA)))}
    print("\nranking: each dev source scored by the structure fitted on the other sources' dev rows; "
          f"two vectors = the features plus {', '.join(EXTRA)}")
    table = {name: {k: tuple(float(np.mean([m[f] for m in v])) for f in METRICS3) for k, v in got.items()}
             for name, got in held.items()}
    for line in lodo.dev_lines(table):
        print(line)
    print("two vectors - one vector, paired by question [95% CI], * = real")
    for k, one in held["one vector"].items():
        cells = []
        for f in METRICS3:
            res = paired(METRICS[f], one, held["two vectors"][k])
            cells.append(f"{f} {res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}]{'*' if res['real'] else ''}"
                         if res else f"{f} -")
        print(f"  {k:<40} " + "   ".join(cells))
    top_k = RecallConfig().signals.vector_top_k
    print(f"\ncandidates: evidence the candidate list missed, and how much of it a search over the vectors of "
          f"each turn alone finds in its top {top_k}")
    for k, (gold, gone, found) in missed(rows, alone, by_user, top_k).items():
        print(f"  {k:<40} evidence {gold:>5}   missed {gone:>4} ({gone / gold:.1%})   found alone {found:>4}"
              f" ({found / gold:.1%} of the evidence)")
    print("\ningest, stock MiniLM on this machine:")
    for line in ingest(by_id):
        print(line)


if __name__ == "__main__":
    main()
