"""The smoke checks a bare GPU node can run (`dkilab gpu --smoke-only`): torch, transformers and accelerate,
plus the few small wheels of `make wheelhouse` (the judge's module: pydantic, cachetools, jieba), with no
mlflow, faiss, GGUF or network, on tiny random-weight models of every architecture in `dkilab.models.tiny`.

    python -m dkilab.cli gpu --smoke-only --report-dir DIR        # on the GPU, fp32 and bf16
    python -m dkilab.cli gpu --smoke-only --cpu --report-dir DIR  # the same checks on the CPU (fp32)
    python -m dkilab.gpu.bundle --out DIR [--cpu]                 # the same

Writes DIR/smoke.json and DIR/smoke.md:
- the device, driver, torch, CUDA and transformers versions;
- `kv`: per architecture and dtype, max |logit difference| between alpha = 1 and the memory text in
  front, KL(alpha 1e-6 || alpha 0) and KL(alpha 1 || alpha 0) (the memory matters), against
  `smoke.TOLERANCE`;
- `batched`: left-padded batched greedy decoding against one prompt at a time, token for token;
- `kv_batched`: questions with different K/V blocks and alphas decoded together (`models.kv_batch`)
  against each decoded alone, token for token;
- `judge`: the judge's batched verdicts (`LLMJudge.prefetch`) against one-by-one verdicts;
- `attention`: the stock kernel, the memory-bias kernel with no memory, and the stock kernel again give
  the same logits (the runner switches between them per cell);
- `freed`: device memory after each model is released, against before it was built.
Exit status 0 when every check passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BATCH_PROMPTS = ("what is my cat called ?", "the user said my sister lives in paris . what city ?",
                 "we talked about a trip", "remember the red car and the blue house . which colour was the car ?")


def environment(device: str) -> dict:
    import torch
    import transformers

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "transformers": transformers.__version__,
           "cuda": torch.version.cuda, "device": device}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            env["driver"] = f"unknown ({type(e).__name__})"
    return env


def _allocated(device: str) -> int:
    import torch

    return torch.cuda.memory_allocated() if device.startswith("cuda") else 0


def _release(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def kv_rows(device: str, dtypes: list[str]) -> list[dict]:
    from dkilab.gpu.smoke import TOLERANCE, kv_figures, memory_matters
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import KVUnsupportedError, prepare_model
    from dkilab.models.tiny import ARCHITECTURES, tiny_model

    rows = []
    for dtype in dtypes:
        exact, near = TOLERANCE[dtype]
        for arch in ARCHITECTURES:
            before = _allocated(device)
            attn = "eager" if arch == "gemma2" else "sdpa"
            hf, tok = tiny_model(arch, attn=attn, dtype=dtype, device=device)
            row: dict[str, Any] = {"check": "kv", "arch": arch, "dtype": dtype, "attention": attn}
            try:
                fig = kv_figures(TransformersChatModel(prepare_model(hf, attn), tok, name=f"tiny-{arch}"))
                row |= fig
                row["ok"] = fig["max_dlogit"] <= exact and fig["kl_tiny_vs_zero"] <= near and memory_matters(fig)
            except KVUnsupportedError as e:
                row |= {"ok": True, "refused": str(e)}
            except Exception as e:  # noqa: BLE001 - a check reports, never stops the bundle
                row |= {"ok": False, "error": f"{type(e).__name__}: {e}"}
            del hf, tok
            _release(device)
            row["freed_bytes_left"] = _allocated(device) - before
            rows.append(row)
    return rows


def batched_rows(device: str, dtypes: list[str], new_tokens: int = 16) -> list[dict]:
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import decode
    from dkilab.models.tiny import tiny_model

    rows = []
    for dtype in dtypes:
        for arch in ("llama", "qwen2"):
            hf, tok = tiny_model(arch, attn="sdpa", dtype=dtype, device=device)
            model = TransformersChatModel(hf, tok, name=f"tiny-{arch}")
            model.eos_token_ids = []  # random weights: decode every token
            ids = [model.encode(p) for p in BATCH_PROMPTS]
            together = [g.token_ids for g in model.decode_batch(ids, new_tokens)]
            alone = [decode(model, p, None, new_tokens)[0] for p in ids]
            same = sum(a == b for a, b in zip(together, alone))
            first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None) for a, b in zip(together, alone)]
            rows.append({"check": "batched", "arch": arch, "dtype": dtype, "prompts": len(ids), "identical": same,
                         "first_divergence": first, "ok": same == len(ids)})
            del hf, model
            _release(device)
    return rows


def kv_batched_rows(device: str, dtypes: list[str], new_tokens: int = 16) -> list[dict]:
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import decode, encode_memory, prepare_model
    from dkilab.models.kv_batch import decode_many
    from dkilab.models.tiny import tiny_model

    rows = []
    for dtype in dtypes:
        for arch in ("llama", "qwen2"):
            hf, tok = tiny_model(arch, attn="sdpa", dtype=dtype, device=device)
            model = TransformersChatModel(prepare_model(hf), tok, name=f"tiny-{arch}")
            model.eos_token_ids = []
            blocks = [encode_memory(model, p) for p in BATCH_PROMPTS[1:3]]
            memories = [[(blocks[0], 1.0)], [(blocks[1], 0.5), (blocks[0], 1.0)], None, [(blocks[1], 0.0)]]
            reqs = [(model.encode(p), m) for p, m in zip(BATCH_PROMPTS, memories)]
            together = [t for t, _ in decode_many(model, reqs, new_tokens)]
            alone = [decode(model, ids, m, new_tokens)[0] for ids, m in reqs]
            same = sum(a == b for a, b in zip(together, alone))
            first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None) for a, b in zip(together, alone)]
            rows.append({"check": "kv_batched", "arch": arch, "dtype": dtype, "prompts": len(reqs), "identical": same,
                         "first_divergence": first, "ok": same == len(reqs)})
            del hf, model, blocks
            _release(device)
    return rows


def judge_rows(device: str, dtypes: list[str]) -> list[dict]:
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.tiny import tiny_model

    rows = []
    for dtype in dtypes:
        row: dict[str, Any] = {"check": "judge", "dtype": dtype}
        try:
            from dkilab.eval.scoring.judge import LLMJudge
        except ImportError as e:
            rows.append(row | {"ok": False, "error": f"{e} (install the wheels of `make wheelhouse`)"})
            continue
        hf, tok = tiny_model("llama", attn="sdpa", dtype=dtype, device=device)
        tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        judge = LLMJudge(TransformersChatModel(hf, tok, name="tiny-llama"), max_new_tokens=8)
        texts = [judge.prompt.format(question="what is my cat called ?", gold="pixel", prediction=p)
                 for p in ("pixel", "your cat is called pixel", "i do not know", "the city was lisbon")]
        judge.prefetch(texts, batch_size=len(texts))
        batched = [judge.replies[t] for t in texts]
        judge.replies.clear()
        alone = [judge._reply(t) for t in texts]
        rows.append(row | {"verdicts": len(texts), "identical": sum(a == b for a, b in zip(batched, alone)),
                           "ok": batched == alone})
        del hf, judge
        _release(device)
    return rows


def attention_rows(device: str, dtypes: list[str]) -> list[dict]:
    import torch

    from dkilab.models.kv import STOCK_ATTR, prepare_model, stock_attention
    from dkilab.models.tiny import tiny_model

    rows = []
    for dtype in dtypes:
        hf, tok = tiny_model("llama", attn="sdpa", dtype=dtype, device=device)
        setattr(hf, STOCK_ATTR, "sdpa")
        ids = torch.tensor([tok(BATCH_PROMPTS[3], add_special_tokens=False)["input_ids"]], device=device)

        def logits(model=hf):
            with torch.inference_mode():
                return model(input_ids=ids).logits[0].float()

        stock = logits()
        prepare_model(hf)
        biased = logits()
        switched_back = stock_attention(hf)
        again = logits()
        d1, d2 = float((biased - stock).abs().max()), float((again - stock).abs().max())
        exact = {"float32": 1e-4, "bfloat16": 0.05, "float16": 0.02}[dtype]
        rows.append({"check": "attention", "dtype": dtype, "kernel_then": hf.config._attn_implementation,
                     "memory_bias_vs_stock": d1, "stock_again_vs_stock": d2, "switched_back": switched_back,
                     "ok": switched_back and d1 <= exact and d2 == 0.0})
        del hf
        _release(device)
    return rows


def to_markdown(env: dict, rows: list[dict]) -> str:
    lines = [f"# dkilab GPU smoke bundle, {time.strftime('%Y-%m-%d')}", "",
             *(f"- {k}: {v}" for k, v in env.items()), "",
             "## K/V injection (tiny random-weight models)", "",
             "| arch | dtype | max abs dlogit, alpha 1 vs text in front | KL(1e-6 vs 0) | KL(1 vs 0) | ok |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r["check"] == "kv":
            if "max_dlogit" in r:
                lines.append(f"| {r['arch']} | {r['dtype']} | {r['max_dlogit']:.3g} | {r['kl_tiny_vs_zero']:.3g} | "
                             f"{r['kl_one_vs_zero']:.3g} | {'yes' if r['ok'] else 'NO'} |")
            else:
                lines.append(f"| {r['arch']} | {r['dtype']} | {r.get('refused') or r.get('error')} | | | "
                             f"{'yes' if r['ok'] else 'NO'} |")
    lines += ["", "## Batched greedy decoding against one prompt at a time", "",
              "| arch | dtype | identical | first divergence per prompt | ok |", "|---|---|---|---|---|"]
    lines += [f"| {r['arch']} | {r['dtype']} | {r['identical']}/{r['prompts']} | {r['first_divergence']} | "
              f"{'yes' if r['ok'] else 'NO'} |" for r in rows if r["check"] == "batched"]
    lines += ["", "## K/V questions decoded together (own blocks and alphas) against one at a time", "",
              "| arch | dtype | identical | first divergence per question | ok |", "|---|---|---|---|---|"]
    lines += [f"| {r['arch']} | {r['dtype']} | {r['identical']}/{r['prompts']} | {r['first_divergence']} | "
              f"{'yes' if r['ok'] else 'NO'} |" for r in rows if r["check"] == "kv_batched"]
    lines += ["", "## The judge: batched verdicts against one by one", "", "| dtype | identical | ok |",
              "|---|---|---|"]
    lines += [f"| {r['dtype']} | {r.get('identical', 0)}/{r.get('verdicts', 0)} {r.get('error', '')} | "
              f"{'yes' if r['ok'] else 'NO'} |" for r in rows if r["check"] == "judge"]
    lines += ["", "## Stock kernel, memory-bias kernel, stock again (max abs logit difference)", "",
              "| dtype | memory-bias vs stock | stock again vs stock | ok |", "|---|---|---|---|"]
    lines += [f"| {r['dtype']} | {r['memory_bias_vs_stock']:.3g} | {r['stock_again_vs_stock']:.3g} | "
              f"{'yes' if r['ok'] else 'NO'} |" for r in rows if r["check"] == "attention"]
    left = [r["freed_bytes_left"] for r in rows if r["check"] == "kv"]
    lines += ["", f"Device memory left allocated after each model was released: at most {max(left, default=0)} bytes "
              f"over {len(left)} models.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dkilab.gpu.bundle", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for smoke.json and smoke.md")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (fp32 only)")
    args = p.parse_args(argv)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("dkilab.gpu.bundle: no CUDA device here; --cpu runs the same checks on the CPU", file=sys.stderr)
        return 2
    device = "cpu" if args.cpu else "cuda:0"
    dtypes = ["float32"] if args.cpu else ["float32", "bfloat16"]
    env = environment(device)
    t = time.perf_counter()
    rows = (kv_rows(device, dtypes) + batched_rows(device, dtypes) + kv_batched_rows(device, dtypes)
            + judge_rows(device, dtypes) + attention_rows(device, dtypes))
    env["seconds"] = round(time.perf_counter() - t, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "smoke.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    md = to_markdown(env, rows)
    (out / "smoke.md").write_text(md)
    print(md)
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print(f"FAIL {r}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
