"""Fine-tuning the MiniLM encoder itself on LoCoMo dev (issue 30's levers; conversations 0-4, categories 1-4):
what it does to dense-only recall@10 and to the learned fusion, leave one conversation out. Never reads
LoCoMo test.

For each dev conversation, all-MiniLM-L6-v2 (sentence-transformers, torch) is fine-tuned on the other four:
each (question, gold evidence turn) pair is a positive, the other turns of its batch of 32 the negatives
(softmax over cosines / 0.05), AdamW, `--epochs` passes at `--lr`, seed 0. The held-out conversation is
then embedded by its fold's model (each turn alone, as MiniLM stores are) and
1. dense only: recall@10 of the cosine ranking, before and after;
2. learned fusion: the dev candidates recalled on stores built by each conversation's own fold model, the
   logistic regression fitted 5-fold over conversations as `dkilab bench retrieval --train` does; against
   the same on the shipped MiniLM stores, with a paired 95% interval (questions resampled, 2,000 draws).

The fold models and their stores live in a temporary directory and are deleted at the end; the stock
stores come from the usual cache. About 25 minutes with the defaults on 2 cores.

    python experiments/bench/finetune_encoder_dev.py [--data-dir DIR] [--epochs 3] [--lr 3e-5]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_levers_dev as levers  # noqa: E402  (its LoCoMo dev loader and out-of-fold rankings)


def turn_texts(data_dir) -> dict[tuple[str, str], str]:
    """{(user, message id): the text a MiniLM store embeds for it (the turn alone)} of LoCoMo dev."""
    from dkilab.bench.fusion_train import _cells
    from dkilab.eval.cell import load_cell_data

    out = {}
    for cell in _cells(None, [levers.DEV]):
        rows = load_cell_data(cell, data_dir).store.conn.execute("SELECT user_id, message_id, content FROM messages")
        out.update(((r["user_id"], r["message_id"]), r["content"]) for r in rows)
    return out


def fine_tune(pairs: list[tuple[str, str]], out: Path, epochs: int, lr: float, batch: int = 32, tau: float = 0.05):
    """MiniLM fine-tuned on (question, evidence) pairs with in-batch negatives, saved to `out`."""
    import torch
    from sentence_transformers import SentenceTransformer

    from dkilab.memory.embedder import resolve_model_path

    torch.manual_seed(0)
    model = SentenceTransformer(resolve_model_path("offline:minilm"), device="cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    model.train()

    def embed(texts):
        return torch.nn.functional.normalize(model(model.tokenize(texts))["sentence_embedding"], dim=-1)
    for _ in range(epochs):
        order = rng.permutation(len(pairs))
        for b in range(0, len(order), batch):
            chunk = [pairs[i] for i in order[b:b + batch]]
            logits = embed([q for q, _ in chunk]) @ embed([d for _, d in chunk]).T / tau
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(chunk)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    model.save(str(out))
    return model


def recall_by_question(rows) -> dict[tuple[str, str], float]:
    from dkilab.eval.metrics.retrieval import evidence_recall

    ranked = levers.oof_rankings(rows)
    return {(r["user"], r["qid"]): evidence_recall(ranked[(r["user"], r["qid"])], list(r["gold"]), 10) for r in rows}


def paired_interval(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float, float]:
    d = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(0)
    boot = d[rng.integers(0, len(d), (draws, len(d)))].mean(1)
    return float(d.mean()), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("DKILAB_DATA_DIR"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-5)
    a = p.parse_args()
    import torch

    from dkilab.bench import fusion_train
    from dkilab.bench.fusion_train import cross_validate
    from dkilab.eval.metrics.retrieval import evidence_recall

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    users, questions, _ = levers.load(a.data_dir)
    texts = turn_texts(a.data_dir)
    print(f"LoCoMo dev: {len(users)} conversations, {len(questions)} questions with evidence; "
          f"{a.epochs} epoch(s) at lr {a.lr}")
    base_rows = fusion_train.collect(a.data_dir, datasets=[levers.DEV])
    tuned_rows, dense = [], {"before": [], "after": []}
    cache_before = os.environ.get("DKILAB_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="dkilab-finetune-") as tmp:
        for held in sorted(users):
            pairs = [(q["text"], texts[(q["user"], g)]) for q in questions if q["user"] != held
                     for g in q["gold"] if (q["user"], g) in texts]
            model = fine_tune(pairs, Path(tmp) / held, a.epochs, a.lr)
            ids, V = users[held]
            mine = [q for q in questions if q["user"] == held]
            W = model.encode([texts[(held, i)] for i in ids], normalize_embeddings=True, show_progress_bar=False)
            Q = model.encode([q["text"] for q in mine], normalize_embeddings=True, show_progress_bar=False)
            for k, q in enumerate(mine):
                dense["before"].append(evidence_recall([ids[i] for i in np.argsort(-(V @ q["vec"]), kind="stable")[:10]],
                                                       q["gold"], 10))
                dense["after"].append(evidence_recall([ids[i] for i in np.argsort(-(W @ Q[k]), kind="stable")[:10]],
                                                      q["gold"], 10))
            os.environ["DKILAB_CACHE_DIR"] = str(Path(tmp) / "cache")  # the fold stores go with the fold models
            try:
                rows = fusion_train.collect(a.data_dir, datasets=[levers.DEV],
                                            embedder={"model": str(Path(tmp) / held), "with_previous_turn": False})
            finally:
                if cache_before is None:
                    os.environ.pop("DKILAB_CACHE_DIR", None)
                else:
                    os.environ["DKILAB_CACHE_DIR"] = cache_before
            tuned_rows += [r for r in rows if r["user"] == held]
            print(f"   {held}: {len(pairs)} training pairs, {len(mine)} held-out questions", flush=True)
    print("1. dense only, recall@10 (each conversation by the model fine-tuned on the other four):")
    print(f"   stock MiniLM   {np.mean(dense['before']):.3f}")
    print(f"   fine-tuned     {np.mean(dense['after']):.3f}")
    print("2. learned fusion, cross-validated over conversations:")
    for name, rows in (("stock MiniLM stores", base_rows), ("fine-tuned stores", tuned_rows)):
        cv = cross_validate(rows, 1.0)
        cover = np.mean([len(r["gold"] & set(r["ids"])) / len(r["gold"]) for r in rows])
        print(f"   {name:<20} recall@10 {cv['locomo recall@10']:.3f}  ndcg@10 {cv['locomo ndcg@10']:.3f}  "
              f"gold among the candidates {cover:.3f}")
    before, after = recall_by_question(base_rows), recall_by_question(tuned_rows)
    keys = sorted(set(before) & set(after))
    diff, lo, hi = paired_interval([after[k] for k in keys], [before[k] for k in keys])
    print(f"   fine-tuned - stock: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] over {len(keys)} questions (out of fold)")


if __name__ == "__main__":
    main()
