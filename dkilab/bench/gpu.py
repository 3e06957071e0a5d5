"""`dkilab bench gpu`: memory as an injected K/V block against the same memory as prompt text, and raw
prefill/decode throughput, on random-weight models built from published configs (no download).

    dkilab bench gpu                    # on a GPU: Llama-3.1-8B and Qwen2.5-7B shapes in bf16
    dkilab bench gpu --shapes tiny      # on the CPU, CI-sized (fp32)
    dkilab bench gpu --shapes smollm2   # on the CPU, SmolLM2-135M's shape (fp32)
    python -m dkilab.bench.gpu ...      # the same, with only torch, transformers and tokenizers installed

Tables (every figure a median of `--repeats` timed runs after one warm-up, measured in this run):
- throughput: prefill and decode tokens/s at batch 1, 8 and 32;
- one question: time to first token and per-token latency, memory as text in front of the question
  (stock attention) against the memory as a K/V block encoded once (the memory-bias attention), and the
  whole answer's time as a ratio, without and with the block's encoding (full_attention recalls a block
  per question, so "with encode" is what it costs against full_history per question);
- session: a 5-turn session whose memory block is encoded once and reused; time to first token per
  turn, memory as text re-read every turn against the block;
- per question at batch 1 and 8: full_attention's cost (each question's own block encoded, then the
  questions decoded together by `dkilab.models.kv_batch`) against full_history's (the same memory as text,
  the questions decoded together), as a ratio per question;
- memory: device bytes per K/V block and per memory token.
Random weights give the arithmetic and memory traffic of the real model, not its answers.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

# published configs (config.json of meta-llama/Llama-3.1-8B-Instruct and Qwen/Qwen2.5-7B-Instruct)
SHAPES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "7b": {
        "llama-3.1-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                       max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 8192})),
        "qwen2.5-7b": ("qwen2", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                     max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                     use_sliding_window=False, rope_parameters={"rope_type": "default",
                                                                                "rope_theta": 1000000.0})),
    },
    "smollm2": {  # config.json of HuggingFaceTB/SmolLM2-135M-Instruct: a CPU-sized real shape
        "smollm2-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                       num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                       max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 100000.0})),
    },
    "tiny": {
        "tiny-llama": ("llama", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=2048, max_position_embeddings=4096,
                                     tie_word_embeddings=False)),
        "tiny-qwen2": ("qwen2", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=2048, max_position_embeddings=4096,
                                     tie_word_embeddings=False, use_sliding_window=False)),
    },
}
# (prompt tokens for throughput, memory tokens, question tokens, new tokens) per size
LENGTHS = {"7b": (512, (1024, 4096), 64, 32), "smollm2": (256, (512, 2048), 32, 16),
           "tiny": (128, (256, 1024), 32, 16)}
BATCHES = (1, 8, 32)
TURNS = 5


class _Timer:
    def __init__(self, device: str):
        import torch

        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def median(self, fn: Callable[[], Any], repeats: int) -> float:
        """Seconds, the median of `repeats` runs after one warm-up."""
        fn()
        times = []
        for _ in range(repeats):
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t)
        return statistics.median(times)


def build(arch: str, sizes: dict, dtype: str, device: str):
    """A random-weight model of `arch` with `sizes`, built on `device` (no CPU copy of the weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(arch, bos_token_id=1, eos_token_id=2, pad_token_id=3, **sizes)
    torch.manual_seed(0)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=getattr(torch, dtype))
    return hf.eval()


class _IdsModel:
    """What `dkilab.models.kv` needs of a chat model, over token ids (the bench never tokenises text)."""
    supports_kv, batch_size = True, 1

    def __init__(self, hf):
        self.model, self.eos_token_ids = hf, []
        self.tokenizer = self  # kv reads bos/eos ids off the tokenizer

    bos_token_id, eos_token_id, pad_token_id = 1, 2, 3


def _random_ids(n: int, vocab: int, seed: int, batch: int = 1) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab, (batch, n), generator=g).tolist()


def _memory(model: _IdsModel, ids: list[int]):
    from dkilab.models.kv import encode_memory_ids

    return encode_memory_ids(model, ids)


def _prefill_plain(hf, ids, cache=None):
    import torch
    from transformers import DynamicCache

    from dkilab.models.kv import cache_kwarg

    cache = cache if cache is not None else DynamicCache()
    device = hf.get_input_embeddings().weight.device
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor(ids, device=device), use_cache=True, **cache_kwarg(hf, cache))
    return out.logits[:, -1], cache


def _decode_plain(hf, ids, steps: int):
    import torch

    from dkilab.models.kv import cache_kwarg

    logits, cache = _prefill_plain(hf, ids)
    with torch.inference_mode():
        for _ in range(steps):
            nxt = logits.argmax(-1, keepdim=True)
            logits = hf(input_ids=nxt, use_cache=True, **cache_kwarg(hf, cache)).logits[:, -1]
    return logits


def throughput(hf, timer: _Timer, prompt: int, steps: int, repeats: int) -> list[dict]:
    vocab = hf.config.vocab_size
    rows = []
    for b in BATCHES:
        ids = _random_ids(prompt, vocab, b, b)
        pre = timer.median(lambda: _prefill_plain(hf, ids), repeats)
        both = timer.median(lambda: _decode_plain(hf, ids, steps), repeats)
        rows.append({"batch": b, "prefill_tok_s": b * prompt / pre,
                     "decode_tok_s": b * steps / max(both - pre, 1e-9), "prefill_s": pre})
    return rows


def one_question(model: _IdsModel, timer: _Timer, memory: int, question: int, steps: int, repeats: int) -> dict:
    from dkilab.models.kv import decode, prefill, prepare_model, stock_attention

    hf = model.model
    vocab = hf.config.vocab_size
    mem_ids, q_ids = _random_ids(memory, vocab, 11)[0], _random_ids(question, vocab, 12)[0]
    text_ids = [1, *mem_ids, *q_ids]
    stock_attention(hf)
    text_ttft = timer.median(lambda: _prefill_plain(hf, [text_ids]), repeats)
    text_all = timer.median(lambda: decode(model, text_ids, None, steps), repeats)
    prepare_model(hf)
    block = _memory(model, mem_ids)
    encode = timer.median(lambda: _memory(model, mem_ids), repeats)
    kv_ttft = timer.median(lambda: prefill(model, q_ids, [(block, 1.0)]), repeats)
    kv_all = timer.median(lambda: decode(model, q_ids, [(block, 1.0)], steps), repeats)
    stock_attention(hf)
    return {"memory_tokens": memory, "question_tokens": question, "new_tokens": steps,
            "text_ttft_ms": text_ttft * 1e3, "kv_ttft_ms": kv_ttft * 1e3, "kv_encode_ms": encode * 1e3,
            "text_per_token_ms": (text_all - text_ttft) / steps * 1e3,
            "kv_per_token_ms": (kv_all - kv_ttft) / steps * 1e3,
            "text_answer_ms": text_all * 1e3, "kv_answer_ms": kv_all * 1e3, "kv_over_text": kv_all / text_all,
            "kv_encoded_over_text": (kv_all + encode) / text_all,
            "block_bytes": block.nbytes, "bytes_per_memory_token": block.nbytes / (memory + 1)}


def per_question(model: _IdsModel, timer: _Timer, memory: int, question: int, steps: int, repeats: int,
                 batches: tuple[int, ...] = (1, 8)) -> list[dict]:
    """Per question, full_attention against full_history at each batch size: text = memory + question as
    one prompt, the batch decoded together; K/V = each question's own block encoded, then the questions
    decoded together with their blocks (`kv_batch.decode_many`)."""
    from dkilab.models.kv import prepare_model, stock_attention
    from dkilab.models.kv_batch import decode_many

    hf = model.model
    vocab = hf.config.vocab_size
    rows = []
    for b in batches:
        mems = _random_ids(memory, vocab, 31, b)
        qs = _random_ids(question, vocab, 32, b)
        stock_attention(hf)
        text = timer.median(lambda: _decode_plain(hf, [[1, *m, *q] for m, q in zip(mems, qs)], steps), repeats)
        prepare_model(hf)

        def kv():
            blocks = [_memory(model, m) for m in mems]
            decode_many(model, [(q, [(blk, 1.0)]) for q, blk in zip(qs, blocks)], steps)

        kv_s = timer.median(kv, repeats)
        stock_attention(hf)
        rows.append({"batch": b, "memory_tokens": memory, "new_tokens": steps, "text_ms_per_question": text / b * 1e3,
                     "kv_ms_per_question": kv_s / b * 1e3, "kv_over_text": kv_s / text})
    return rows


def session(model: _IdsModel, timer: _Timer, memory: int, question: int, steps: int, repeats: int) -> list[dict]:
    """TTFT per turn of a TURNS-turn session: the history grows by question + answer each turn. Text re-reads
    memory + history + question every turn; K/V encodes the block on turn 1 (counted there) and reuses it."""
    from dkilab.models.kv import prefill, prepare_model, stock_attention

    hf = model.model
    vocab = hf.config.vocab_size
    mem_ids = _random_ids(memory, vocab, 21)[0]
    rows: list[dict] = []
    history: list[int] = []
    block = None
    for turn in range(1, TURNS + 1):
        q_ids = _random_ids(question, vocab, 100 + turn)[0]
        stock_attention(hf)
        text = timer.median(lambda: _prefill_plain(hf, [[1, *mem_ids, *history, *q_ids]]), repeats)
        prepare_model(hf)
        encode = 0.0
        if block is None:
            encode = timer.median(lambda: _memory(model, mem_ids), repeats)
            block = _memory(model, mem_ids)
        kv = timer.median(lambda: prefill(model, [*history, *q_ids], [(block, 1.0)]), repeats)
        rows.append({"turn": turn, "history_tokens": len(history), "text_ttft_ms": text * 1e3,
                     "kv_ttft_ms": (kv + encode) * 1e3, "kv_over_text": (kv + encode) / text})
        history += q_ids + _random_ids(steps, vocab, 200 + turn)[0]
    stock_attention(hf)
    return rows


def run_bench(shapes: str, device: str, dtype: str, repeats: int, echo=print) -> dict:
    import torch

    timer = _Timer(device)
    prompt, memories, question, steps = LENGTHS[shapes]
    result: dict[str, Any] = {"shapes": shapes, "device": device, "dtype": dtype, "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
                              "models": {}}
    for name, (arch, sizes) in SHAPES[shapes].items():
        t = time.perf_counter()
        hf = build(arch, sizes, dtype, device)
        from dkilab.models.kv import STOCK_ATTR

        setattr(hf, STOCK_ATTR, "sdpa")
        model = _IdsModel(hf)
        params = sum(p.numel() for p in hf.parameters())
        echo(f"{name}: {params / 1e9:.2f} B parameters in {dtype} on {device}, "
             f"built in {time.perf_counter() - t:.1f} s")
        entry = {"parameters": params, "throughput": throughput(hf, timer, prompt, steps, repeats),
                 "one_question": [one_question(model, timer, m, question, steps, repeats) for m in memories],
                 "per_question": per_question(model, timer, memories[0], question, steps, repeats),
                 "session": session(model, timer, memories[0], question, steps, repeats)}
        if device.startswith("cuda"):
            entry["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        result["models"][name] = entry
        echo(tables(name, entry))
        del hf, model
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return result


def tables(name: str, e: dict) -> str:
    lines = [f"\n### {name}", "", "| batch | prefill tok/s | decode tok/s |", "|---|---|---|"]
    lines += [f"| {r['batch']} | {r['prefill_tok_s']:,.0f} | {r['decode_tok_s']:,.0f} |" for r in e["throughput"]]
    lines += ["",
              "| memory tokens | TTFT text ms | TTFT K/V ms | encode once ms | per token text ms | per token K/V ms "
              "| answer K/V / text | with encode / text | K/V block MiB | bytes per token |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['memory_tokens']} | {r['text_ttft_ms']:.2f} | {r['kv_ttft_ms']:.2f} | {r['kv_encode_ms']:.2f} | "
              f"{r['text_per_token_ms']:.2f} | {r['kv_per_token_ms']:.2f} | {r['kv_over_text']:.2f} | "
              f"{r['kv_encoded_over_text']:.2f} | {r['block_bytes'] / 2**20:.1f} | {r['bytes_per_memory_token']:,.0f} |"
              for r in e["one_question"]]
    lines += ["", "| batch | memory tokens | full_history ms per question | full_attention ms per question "
              "(own block encoded) | full_attention / full_history |", "|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {r['memory_tokens']} | {r['text_ms_per_question']:.2f} | "
              f"{r['kv_ms_per_question']:.2f} | {r['kv_over_text']:.2f} |" for r in e.get("per_question", [])]
    lines += ["", "| turn | history tokens | TTFT text ms | TTFT K/V ms (turn 1: + encode) | K/V / text |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['turn']} | {r['history_tokens']} | {r['text_ttft_ms']:.2f} | {r['kv_ttft_ms']:.2f} | "
              f"{r['kv_over_text']:.2f} |" for r in e["session"]]
    if "peak_gib" in e:
        lines += ["", f"peak device memory: {e['peak_gib']:.1f} GiB"]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", choices=sorted(SHAPES), default=None,
                   help="7b (Llama-3.1-8B, Qwen2.5-7B; the default on a GPU), smollm2 (SmolLM2-135M) or tiny "
                        "(the default on the CPU)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even where CUDA is available")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per figure (median; after one warm-up)")
    p.add_argument("--out", default=None, help="folder for bench_gpu.json and bench_gpu.md")


def main(args) -> int:
    import torch

    device = "cuda:0" if torch.cuda.is_available() and not args.cpu else "cpu"
    shapes = args.shapes or ("7b" if device != "cpu" else "tiny")
    dtype = "bfloat16" if device != "cpu" else "float32"
    if args.repeats < 1:
        print("dkilab bench gpu: --repeats must be at least 1", file=sys.stderr)
        return 2
    print(f"dkilab bench gpu: {shapes} shapes in {dtype} on {device}")
    result = run_bench(shapes, device, dtype, args.repeats)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_gpu.json").write_text(json.dumps(result, indent=1))
        head = (f"# dkilab bench gpu, {time.strftime('%Y-%m-%d')}: {shapes} shapes, {dtype}, "
                f"{result['gpu'] or 'CPU'}, torch {result['torch']}\n")
        (out / "bench_gpu.md").write_text(head + "\n".join(tables(n, e) for n, e in result["models"].items()) + "\n")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m dkilab.bench.gpu", description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
