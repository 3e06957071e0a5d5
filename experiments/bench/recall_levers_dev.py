"""Recall levers studied on LoCoMo dev only (issue 30; conversations 0-4, categories 1-4, MiniLM stores as
`auto` gives them): what they do to the learned fusion's cross-validated recall@10.

1. A query-side linear adapter: the query's MiniLM vector times a 384x384 matrix (initialised at the identity,
   penalised by lam * ||W - I||^2), fitted so the question's softmax over its conversation's messages puts
   its mass on the gold evidence. Stored vectors are untouched (ingest cost nothing). Scored leave one
   conversation out: dense-only recall@10, then the learned fusion re-fitted (5-fold over conversations, as
   `dkilab bench retrieval --train` does) on candidates recalled with each conversation's out-of-fold adapter.
2. Session diversity: at most `cap` messages per session in the top 10 of the learned ranking (out of fold).
3. Wider candidate lists: each signal's top 50 (the default), 100 or 200.
4. Where the learned fusion loses: per category, recall@10 and whether each gold message was a candidate.
5. The ranker's model: the logistic regression against nonlinear ones (gradient-boosted trees, an MLP) on the same
   candidates and features, 5-fold over conversations.
6. Pseudo-relevance in vector space: each candidate's cosine with the centroid of the top-k fused hits (stored
   vectors, no extra encoding), its z-score, a Rocchio query (question + centroid) and the best cosine with a top
   hit, added to the features.

    python experiments/bench/recall_levers_dev.py [--data-dir DIR] [--lam 0.01 0.1 1]

Needs torch (`make setup` installs it) and $DKILAB_DATA_DIR (or --data-dir). Never reads LoCoMo test."""
from __future__ import annotations

import argparse
import os

import numpy as np

DEV = {"name": "locomo", "categories": [1, 2, 3, 4], "split": "dev"}


def load(data_dir):
    """({user: (message ids, vectors)}, [question dicts], {message id: session id}) of LoCoMo dev."""
    from dkilab.bench.fusion_train import STOCK, _cells
    from dkilab.eval.harness.cell import load_cell_data, question_text

    users: dict = {}
    questions = []
    session: dict[str, str] = {}
    for cell in _cells({**STOCK, "with_previous_turn": False}, [DEV]):  # stock MiniLM's stores of each turn alone
        data = load_cell_data(cell, data_dir)
        store = data.store
        for conv, item in data.items:
            if not item.evidence_ids:
                continue
            u = conv.user_id
            if u not in users:
                rows = store.conn.execute("SELECT message_id, session_id, embedding FROM messages WHERE user_id=? AND "
                                          "embedding IS NOT NULL", [u]).fetchall()
                session.update((r["message_id"], r["session_id"]) for r in rows)
                vecs = np.frombuffer(b"".join(r["embedding"] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                users[u] = ([r["message_id"] for r in rows], vecs)
            q = question_text(item)
            questions.append({"user": u, "text": q, "vec": np.asarray(store.embedder.encode_query(q), np.float32).ravel(),
                              "gold": list(item.evidence_ids), "category": item.category, "qid": item.qid})
    return users, questions, session


def fit_adapter(users, questions, lam: float, epochs: int = 30, tau: float = 0.05, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    dim = next(iter(users.values()))[1].shape[1]
    V = {u: torch.tensor(v) for u, (_, v) in users.items()}
    idx = {u: {i: k for k, i in enumerate(ids)} for u, (ids, _) in users.items()}
    data = [(q["user"], torch.tensor(q["vec"]), [idx[q["user"]][g] for g in q["gold"] if g in idx[q["user"]]])
            for q in questions]
    data = [d for d in data if d[2]]
    eye = torch.eye(dim)
    W = eye.clone().requires_grad_(True)
    opt = torch.optim.Adam([W], lr=1e-3)
    for _ in range(epochs):
        order = torch.randperm(len(data)).tolist()
        for b in range(0, len(order), 32):
            batch = order[b:b + 32]
            loss = torch.zeros(())
            for k in batch:
                u, q, pos = data[k]
                a = q @ W
                loss = loss - torch.log_softmax(V[u] @ (a / a.norm()) / tau, 0)[pos].mean()
            loss = loss / len(batch) + lam * ((W - eye) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return W.detach().numpy()


def dense_recall(users, questions, W=None, k: int = 10) -> float:
    from dkilab.eval.scoring.retrieval import evidence_recall

    out = []
    for q in questions:
        ids, V = users[q["user"]]
        v = q["vec"] if W is None else q["vec"] @ W
        order = np.argsort(-(V @ v), kind="stable")[:k]
        out.append(evidence_recall([ids[i] for i in order], q["gold"], k))
    return float(np.mean(out))


def out_of_fold(users, questions, lam: float):
    """{user: the adapter fitted on the other conversations}."""
    return {u: fit_adapter(users, [q for q in questions if q["user"] != u], lam) for u in sorted(users)}


def fusion_rows(data_dir, adapted: dict[str, np.ndarray] | None):
    """The learned fusion's dev candidates, recalled with the given query vectors (by question text)."""
    from dkilab.bench import fusion_train
    from dkilab.encoders import embedder as E

    original = E.Embedder.encode_query
    if adapted is not None:
        E.Embedder.encode_query = lambda self, text: adapted[text] if text in adapted else original(self, text)
    try:
        return fusion_train.collect(data_dir, datasets=[DEV])
    finally:
        E.Embedder.encode_query = original


def oof_rankings(rows, C: float = 1.0):
    from dkilab.bench.fusion_train import _fit

    out = {}
    for u in sorted({r["user"] for r in rows}):
        scaler, lr = _fit([r for r in rows if r["user"] != u], C)
        for r in rows:
            if r["user"] == u:
                s = lr.decision_function(scaler.transform(r["X"]))
                out[(u, r["qid"])] = [r["ids"][k] for k in np.argsort(-s, kind="stable")]
    return out


def capped(ranked: list[str], cap: int, session_of, k: int = 10) -> list[str]:
    top, rest, seen = [], [], {}
    for i in ranked:
        s = session_of(i)
        if len(top) < k and seen.get(s, 0) < cap:
            top.append(i)
            seen[s] = seen.get(s, 0) + 1
        else:
            rest.append(i)
    return top + rest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("DKILAB_DATA_DIR"))
    p.add_argument("--lam", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    a = p.parse_args()
    from dkilab.bench import fusion_train
    from dkilab.bench.fusion_train import cross_validate
    from dkilab.eval.scoring.retrieval import evidence_recall

    users, questions, session = load(a.data_dir)
    print(f"LoCoMo dev: {len(users)} conversations, {len(questions)} questions with evidence")
    print("1. query-side linear adapter, leave one conversation out (dense only, recall@10):")
    print(f"   no adapter    {dense_recall(users, questions):.3f}")
    best = None
    for lam in a.lam:
        folds = out_of_fold(users, questions, lam)
        got = sum(dense_recall(users, [q for q in questions if q["user"] == u], W) * sum(q["user"] == u for q in questions)
                  for u, W in folds.items()) / len(questions)
        print(f"   lam={lam:<6}    {got:.3f}")
        if best is None or got > best[1]:
            best = (lam, got, folds)
    lam, _, folds = best
    adapted = {}
    for q in questions:
        v = q["vec"] @ folds[q["user"]]
        adapted[q["text"]] = (v / np.linalg.norm(v)).astype(np.float32)
    base_rows, adapted_rows = fusion_rows(a.data_dir, None), fusion_rows(a.data_dir, adapted)
    for name, rows in (("learned fusion", base_rows), (f"learned fusion, adapter lam={lam}", adapted_rows)):
        cv = cross_validate(rows, 1.0)
        cover = np.mean([len(r["gold"] & set(r["ids"])) / len(r["gold"]) for r in rows])
        print(f"   {name:<36} cross-validated recall@10 {cv['locomo recall@10']:.3f}  ndcg@10 "
              f"{cv['locomo ndcg@10']:.3f}  gold among the candidates {cover:.3f}")
    print("2. at most `cap` messages per session in the learned fusion's top 10 (out of fold, recall@10):")
    ranked = oof_rankings(base_rows)
    for cap in (None, 1, 2, 3, 4):
        vals = [evidence_recall(ranked[(r["user"], r["qid"])] if cap is None else
                                capped(ranked[(r["user"], r["qid"])], cap, session.__getitem__), list(r["gold"]), 10)
                for r in base_rows]
        print(f"   cap {cap if cap is not None else 'none':<5} {np.mean(vals):.3f}")
    print("3. wider candidate lists (each signal's top k; the learned fusion re-fitted, 5-fold over conversations):")
    for k in (50, 100, 200):
        rows = base_rows if k == 50 else fusion_train.collect(a.data_dir, datasets=[DEV], recall={
            "signals.vector_top_k": k, "signals.lexical_top_k": k})
        cv = cross_validate(rows, 1.0)
        cover = np.mean([len(r["gold"] & set(r["ids"])) / len(r["gold"]) for r in rows])
        print(f"   top {k:<4} {np.mean([len(r['ids']) for r in rows]):5.0f} candidates  gold among them {cover:.3f}  "
              f"cross-validated recall@10 {cv['locomo recall@10']:.3f}  ndcg@10 {cv['locomo ndcg@10']:.3f}")
    print("4. where the learned fusion loses (out of fold): per category, recall@10 and where its gold messages are")
    category = {(q["user"], q["qid"]): q["category"] for q in questions}
    table: dict = {}
    for r in base_rows:
        order = ranked[(r["user"], r["qid"])]
        t = table.setdefault(category[(r["user"], r["qid"])], {"recall": [], "missing": 0, "below": 0, "top": 0})
        t["recall"].append(evidence_recall(order, list(r["gold"]), 10))
        for g in r["gold"]:
            t["missing" if g not in order else "below" if order.index(g) >= 10 else "top"] += 1
    for c in sorted(table):
        t = table[c]
        n = t["missing"] + t["below"] + t["top"]
        print(f"   category {c}: {len(t['recall']):>3} questions  recall@10 {np.mean(t['recall']):.3f}  gold messages {n:>3}: "
              f"not a candidate {t['missing'] / n:.2f}, ranked below 10 {t['below'] / n:.2f}, in the top 10 {t['top'] / n:.2f}")
    print("5. the ranker's model on the same candidates and features (5-fold over conversations):")
    for name, make in rankers().items():
        rec, nd = cv_model(base_rows, lambda make=make: _Ranker(make))
        print(f"   {name:<56} recall@10 {rec:.3f}  ndcg@10 {nd:.3f}")
    print("6. pseudo-relevance in vector space: centroid of the top-k fused hits as features (logistic regression, 5-fold):")
    lr = rankers()["logistic regression (the default)"]
    for k in (3, 5, 10):
        rec, nd = cv_model(base_rows, lambda: _Ranker(lr), extra=centroid_features(users, questions, k))
        print(f"   k={k:<3} recall@10 {rec:.3f}  ndcg@10 {nd:.3f}")


def cv_model(rows, make, extra=None, folds: int = 5) -> tuple[float, float]:
    """Cross-validated (recall@10, ndcg@10) of a ranker `make()` (fit(X, y), score(X)) over `folds` folds of
    conversations; `extra(row)` adds feature columns."""
    from dkilab.eval.scoring.retrieval import evidence_recall, ndcg

    users = sorted({r["user"] for r in rows})
    fold = {u: k % folds for k, u in enumerate(users)}
    X_of = {id(r): (np.hstack([r["X"], extra(r)]) if extra else r["X"]) for r in rows}
    rec, nd = [], []
    for k in range(folds):
        train = [r for r in rows if fold[r["user"]] != k]
        model = make()
        model.fit(np.concatenate([X_of[id(r)] for r in train]),
                  np.concatenate([[i in r["gold"] for i in r["ids"]] for r in train]))
        for r in rows:
            if fold[r["user"]] == k:
                ranked = [r["ids"][j] for j in np.argsort(-model.score(X_of[id(r)]), kind="stable")]
                rec.append(evidence_recall(ranked, list(r["gold"]), 10))
                nd.append(ndcg(ranked, list(r["gold"]), 10))
    return float(np.mean(rec)), float(np.mean(nd))


class _Ranker:
    """A scikit-learn classifier as a ranker: standardised features, scored by its decision function."""

    def __init__(self, make):
        self.make = make

    def fit(self, X, y):
        from sklearn.preprocessing import StandardScaler

        self.scaler = StandardScaler().fit(X)
        self.model = self.make().fit(self.scaler.transform(X), y)
        return self

    def score(self, X):
        Z = self.scaler.transform(X)
        f = getattr(self.model, "decision_function", None)
        return f(Z) if f is not None else self.model.predict_proba(Z)[:, 1]


def rankers():
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    return {
        "logistic regression (the default)": lambda: LogisticRegression(C=1.0, max_iter=5000),
        "gradient-boosted trees, lr 0.05, 200 rounds, 15 leaves": lambda: HistGradientBoostingClassifier(
            learning_rate=0.05, max_iter=200, max_leaf_nodes=15, random_state=0),
        "gradient-boosted trees, lr 0.03, 500 rounds, 8 leaves": lambda: HistGradientBoostingClassifier(
            learning_rate=0.03, max_iter=500, max_leaf_nodes=8, random_state=0),
        "MLP, 64 hidden, alpha 0.01": lambda: MLPClassifier(hidden_layer_sizes=(64,), alpha=1e-2, max_iter=300,
                                                            early_stopping=True, random_state=0),
        "MLP, 32+16 hidden, alpha 0.01": lambda: MLPClassifier(hidden_layer_sizes=(32, 16), alpha=1e-2, max_iter=300,
                                                               early_stopping=True, random_state=0),
    }


def centroid_features(users, questions, k: int):
    """row -> [cos with the top-k fused hits' centroid, its z-score, Rocchio cosine, its z-score, best cosine with
    a top hit (itself excluded), its z-score]."""
    from dkilab.recall.learned import FEATURES

    rank_col = FEATURES.index("log_fused_rank")
    vec = {u: dict(zip(ids, V)) for u, (ids, V) in users.items()}
    qv = {(q["user"], q["qid"]): q["vec"] / np.linalg.norm(q["vec"]) for q in questions}

    def z(v):
        return (v - v.mean()) / (v.std() + 1e-6)

    def extra(r):
        V = np.stack([vec[r["user"]][i] for i in r["ids"]])
        top = np.argsort(r["X"][:, rank_col], kind="stable")[:k]
        c = V[top].mean(0)
        c /= np.linalg.norm(c)
        roc = qv[(r["user"], r["qid"])] + c
        roc /= np.linalg.norm(roc)
        near = V @ V[top].T
        near[top, np.arange(len(top))] = -1.0
        cc, rc, mx = V @ c, V @ roc, near.max(1)
        return np.column_stack([cc, z(cc), rc, z(rc), mx, z(mx)])
    return extra


if __name__ == "__main__":
    main()
