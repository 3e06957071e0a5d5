"""K/V memory injection: a memory text's keys/values at negative positions, weighted by alpha.

- `encode_memory(model, text)` runs the memory once at positions -m..-1 into a `DynamicCache`.
  The visible prompt then keeps positions 0..n-1; with RoPE only relative offsets matter, so at
  alpha = 1 the model sees exactly what it would see with the memory text in front of the prompt.
- alpha enters as an additive log(alpha) bias on the memory's key columns of every attention row
  (softmax weight of each memory column times alpha, renormalised), through an attention function
  registered with transformers' `AttentionInterface` that wraps SDPA's `position_bias`. V is never
  scaled. alpha = 0 drops the block (log 0 = -inf: the block gets no weight), so the output is
  exactly the no-memory output.
- Attention sink: a memory is encoded behind the model's BOS token, and that one column stays
  unbiased. Most heads park their attention on the first token of a sequence; if the bias scaled
  that sink too, small alphas would tear attention away from it and push the output far from both
  the no-memory and the full-memory answer (seen on SmolLM2 during development). With the sink
  kept, the output moves monotonically from one end to the other (tests/models/test_kv.py).
  At alpha = 1 the model sees exactly `[BOS] + memory + prompt`.
- Several blocks (preferences, history) are laid side by side before the prompt, each with its own
  alpha: a block's cached keys are re-rotated to its place (RoPE rotations compose), so nothing is
  recomputed per question. The stored caches are never mutated: each call builds a fresh cache.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

ATTN_IMPLEMENTATION = "dkilab_memory_bias"
_registered = False


def _memory_bias_attention(module, query, key, value, attention_mask, memory_bias=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if memory_bias is not None:
        kv_len = key.shape[-2]
        bias = torch.zeros(kv_len, dtype=query.dtype, device=query.device)
        bias[: memory_bias.shape[0]] = memory_bias.to(query.dtype)
        kwargs["position_bias"] = bias.view(1, 1, 1, kv_len)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_attention() -> None:
    """Register the memory-bias attention (SDPA + log-alpha key bias) and its mask function."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, _memory_bias_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    _registered = True


@dataclass
class MemoryKV:
    """A memory text encoded once: per-layer (keys, values) of `[sink] + token_ids` at -(n+1)..-1."""
    text: str
    token_ids: list[int]
    sink_id: int
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(repr=False)
    encode_ms: float = 0.0

    @property
    def n_tokens(self) -> int:
        """Memory text tokens (the sink column not counted)."""
        return len(self.token_ids)


def _hf(model):
    """The transformers model and tokenizer behind a ChatModel (refuses models without K/V access)."""
    if not getattr(model, "supports_kv", False):
        raise TypeError(f"K/V memory injection needs a local transformers model; {model!r} has no K/V access "
                        "(an OpenAI-compatible endpoint only returns text)")
    return model.model, model.tokenizer


@torch.inference_mode()
def encode_memory(model, text: str) -> MemoryKV:
    """Encode `text` (tokenised exactly as given, no special tokens added) into K/V at -m..-1."""
    from transformers import DynamicCache

    hf, tok = _hf(model)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("encode_memory got an empty memory text")
    sink = sink_token_id(tok)
    t = time.perf_counter()
    cache = DynamicCache(config=hf.config)
    pos = torch.arange(-len(ids) - 1, 0, device=hf.device).unsqueeze(0)
    hf(input_ids=torch.tensor([[sink, *ids]], device=hf.device), position_ids=pos, past_key_values=cache, use_cache=True)
    layers = [(layer.keys.detach().clone(), layer.values.detach().clone()) for layer in cache.layers]
    return MemoryKV(text, ids, sink, layers, (time.perf_counter() - t) * 1000)


def sink_token_id(tokenizer) -> int:
    """The token a memory is encoded behind: BOS, else EOS (what starts a document in training)."""
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    raise TypeError("the tokenizer has neither a BOS nor an EOS token to use as attention sink")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _shift_keys(hf, keys: torch.Tensor, delta: int) -> torch.Tensor:
    """Keys rotated by RoPE at position p re-rotated to p + delta (exact: rotations compose)."""
    if delta == 0:
        return keys
    rotary = getattr(getattr(hf, "model", hf), "rotary_emb", None)
    if rotary is None:
        raise TypeError(f"{type(hf).__name__} has no rotary embedding: several memory blocks cannot be laid side by side")
    cos, sin = rotary(keys, position_ids=torch.tensor([[delta]], device=keys.device))
    cos, sin = cos.unsqueeze(1).to(keys.dtype), sin.unsqueeze(1).to(keys.dtype)  # (1, 1, 1, head_dim)
    return keys * cos + _rotate_half(keys) * sin


def build_cache(model, memories):
    """A fresh DynamicCache: one sink column, then the memory blocks side by side; and the bias.

    `memories`: [(MemoryKV, alpha), ...]; blocks with alpha == 0 are left out. The sink comes from
    the first kept block (a sink's K/V depend on nothing but its position, so one serves all).
    Returns (cache or None, bias tensor or None, injected columns incl. the sink).
    """
    from transformers import DynamicCache

    hf, _ = _hf(model)
    blocks = []
    for mem, alpha in memories or []:
        if not isinstance(mem, MemoryKV):
            raise TypeError(f"memories must be (MemoryKV, alpha) pairs, got {type(mem).__name__}")
        if alpha < 0 or not math.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
        if alpha > 0:
            blocks.append((mem, float(alpha)))
    if not blocks:
        return None, None, 0
    total = 1 + sum(m.n_tokens for m, _ in blocks)
    cache = DynamicCache(config=hf.config)
    after = total - 1
    per_layer: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in blocks[0][0].layers]
    for b, (mem, _) in enumerate(blocks):
        after -= mem.n_tokens  # tokens of later blocks: this block moves that far to the left
        start = 0 if b == 0 else 1  # later blocks leave their own sink out
        for i, (k, v) in enumerate(mem.layers):
            per_layer[i].append((_shift_keys(hf, k[..., start:, :], -after), v[..., start:, :]))
    for i, kv in enumerate(per_layer):  # torch.cat copies: the stored blocks stay untouched
        cache.update(torch.cat([k for k, _ in kv], dim=-2), torch.cat([v for _, v in kv], dim=-2), i)
    bias = torch.cat([torch.zeros(1), *(torch.full((m.n_tokens,), math.log(a)) for m, a in blocks)]).to(hf.device)
    return cache, bias, total


@torch.inference_mode()
def prefill(model, prompt_ids: list[int], memories=None):
    """Run the prompt after the memory blocks -> (logits of the last position, cache, bias, injected)."""
    hf, _ = _hf(model)
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    cache, bias, injected = build_cache(model, memories)
    if cache is None:
        from transformers import DynamicCache

        cache = DynamicCache(config=hf.config)
    kwargs = {"memory_bias": bias} if bias is not None else {}
    out = hf(input_ids=torch.tensor([prompt_ids], device=hf.device),
             position_ids=torch.arange(len(prompt_ids), device=hf.device).unsqueeze(0),
             past_key_values=cache, use_cache=True, **kwargs)
    return out.logits[0, -1].float(), cache, bias, injected


def next_token_logits(model, prompt_text: str, memories=()) -> torch.Tensor:
    """Logits for the token after `prompt_text` (tokenised exactly as given) with K/V memories."""
    _, tok = _hf(model)
    logits, _, _, _ = prefill(model, tok(prompt_text, add_special_tokens=False)["input_ids"], list(memories))
    return logits


@torch.inference_mode()
def decode(model, prompt_ids: list[int], memories=None, max_new_tokens: int = 64, temperature: float = 0.0,
           stop: list[str] | None = None, seed: int | None = None) -> tuple[list[int], int]:
    """Greedy (temperature 0) or sampled decoding after the memories -> (new token ids, injected tokens)."""
    hf, tok = _hf(model)
    logits, cache, bias, injected = prefill(model, prompt_ids, memories)
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    eos = set(model.eos_token_ids)
    new: list[int] = []
    pos = len(prompt_ids)
    kwargs = {"memory_bias": bias} if bias is not None else {}
    for _ in range(max_new_tokens):
        if temperature and temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = int(torch.multinomial(probs.cpu(), 1, generator=gen))
        else:
            nxt = int(torch.argmax(logits))
        if nxt in eos:
            break
        new.append(nxt)
        if stop and any(s in tok.decode(new[-16:], skip_special_tokens=True) for s in stop):
            break
        out = hf(input_ids=torch.tensor([[nxt]], device=hf.device), position_ids=torch.tensor([[pos]], device=hf.device),
                 past_key_values=cache, use_cache=True, **kwargs)
        logits = out.logits[0, -1].float()
        pos += 1
    return new, injected
