"""K/V memory injection: a memory text's keys/values at negative positions, weighted by alpha.

- `encode_memory(model, text)` runs the memory once at positions -m..-1 into a `DynamicCache`.
  The visible prompt then keeps positions 0..n-1; with RoPE only relative offsets matter, so at
  alpha = 1 the model sees exactly what it would see with the memory text in front of the prompt.
- alpha enters as an additive log(alpha) bias on the memory's key columns of every attention row
  (softmax weight of each memory column times alpha, renormalised), added to the float attention
  mask by functions registered with transformers' `AttentionInterface` that wrap SDPA or the
  architecture's own eager attention (so after Gemma 2's soft-capping). V is never scaled.
- Attention sink: a memory is encoded behind the model's BOS token, and that one column stays
  unbiased. Most heads park their attention on the first token of a sequence; if the bias scaled
  that sink too, small alphas would tear attention away from it and push the output far from both
  ends. A block at alpha = 0 keeps its place with a bias of -inf, so alpha = 0 is the prompt after
  a lone sink (no information from the block; the K/V strategies' no-memory baseline) and alpha -> 0
  converges to it; at alpha = 1 the model sees exactly `[BOS] + memory + prompt`.
- Architectures (`check_support`): RoPE with fixed frequencies and full or sliding-window attention
  layers; caches are full layers everywhere (the masks apply a sliding window), and keys move with
  each layer's own rotary embedding. Anything else is refused by name (`KVUnsupportedError`).
- Several blocks (preferences, history) are laid side by side before the prompt, each with its own
  alpha: a block's cached keys are re-rotated to its place (RoPE rotations compose), so nothing is
  recomputed per question. The stored caches are never mutated: each call builds a fresh cache.
"""
from __future__ import annotations

import inspect
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from dkilab.types import KVModel

ATTN_IMPLEMENTATION = "dkilab_memory_bias"  # SDPA underneath
ATTN_IMPLEMENTATION_EAGER = "dkilab_memory_bias_eager"  # the architecture's own eager attention underneath
_registered = False


class KVUnsupportedError(TypeError):
    """This model cannot take K/V memory injection (the message names the architecture and why)."""


def _with_bias(attention_mask, memory_bias, query, key):
    """The float mask plus log(alpha) on the memory's key columns (the first memory_bias.shape[-1] ones);
    `memory_bias` is one row for every sequence, or one row per sequence of the batch (`kv_batch`)."""
    kv_len = key.shape[-2]
    rows = memory_bias.reshape(-1, memory_bias.shape[-1])
    bias = torch.zeros(rows.shape[0], kv_len, dtype=query.dtype, device=query.device)
    bias[:, : rows.shape[1]] = rows.to(device=query.device, dtype=query.dtype)
    bias = bias.view(rows.shape[0], 1, 1, kv_len)
    if attention_mask is None:
        return bias
    if attention_mask.dtype == torch.bool:
        attention_mask = torch.where(attention_mask, 0.0, torch.finfo(query.dtype).min).to(query.dtype)
    return attention_mask[..., :kv_len].to(query.device) + bias


def _memory_bias_sdpa(module, query, key, value, attention_mask, memory_bias=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if memory_bias is not None:
        attention_mask = _with_bias(attention_mask, memory_bias, query, key)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _memory_bias_eager(module, query, key, value, attention_mask, memory_bias=None, **kwargs):
    """The bias is added where the mask is, i.e. after soft-capping (Gemma 2): alpha scales the weight."""
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise KVUnsupportedError(f"{type(module).__name__} has no eager attention function to wrap")
    if memory_bias is not None:
        attention_mask = _with_bias(attention_mask, memory_bias, query, key)
    return eager(module, query, key, value, attention_mask, **kwargs)


def _float_mask(*args, **kwargs):
    """Masks for the memory-bias attention: always a float mask (never skipped for `is_causal`)."""
    from transformers.masking_utils import eager_mask

    return eager_mask(*args, **kwargs)


def register_attention() -> None:
    """Register the memory-bias attention functions (SDPA and eager, + log-alpha key bias) and their mask."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, _memory_bias_sdpa)
    AttentionInterface.register(ATTN_IMPLEMENTATION_EAGER, _memory_bias_eager)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _float_mask)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION_EAGER, _float_mask)
    _registered = True


def attn_implementation(base: str = "sdpa") -> str:
    """The registered memory-bias implementation over `base` ("sdpa" or "eager")."""
    register_attention()
    if base not in ("sdpa", "eager"):
        raise ValueError(f"attn_implementation {base!r}: expected sdpa or eager")
    return ATTN_IMPLEMENTATION if base == "sdpa" else ATTN_IMPLEMENTATION_EAGER


STOCK_ATTR = "_dkilab_stock_attn"  # set by load_model: the kernel transformers chose, restored for text cells


def prepare_model(hf, base: str | None = None):
    """Switch a transformers model to the memory-bias attention over its current (or `base`) kernel
    (a flash kernel has no float-mask path: the memory-bias attention then runs over SDPA)."""
    current = getattr(hf.config, "_attn_implementation", None) or "sdpa"
    if current in (ATTN_IMPLEMENTATION, ATTN_IMPLEMENTATION_EAGER) and base is None:
        return hf
    base = base or ("eager" if current == "eager" or not getattr(hf, "_supports_sdpa", True) else "sdpa")
    if base == "sdpa" and not getattr(hf, "_supports_sdpa", True):
        raise KVUnsupportedError(f"{type(hf).__name__} (model_type {hf.config.model_type!r}) cannot run sdpa "
                                 "attention in transformers (it declares no SDPA support, e.g. Gemma 2's "
                                 "soft-capping); use attn_implementation: eager")
    try:
        hf.set_attn_implementation(attn_implementation(base))
    except ValueError as e:  # e.g. Gemma 2 has no SDPA path in transformers (its soft-capping needs eager)
        raise KVUnsupportedError(f"{type(hf).__name__} (model_type {hf.config.model_type!r}) cannot run {base} "
                                 f"attention in this transformers: {str(e).split('.')[0]}; use "
                                 "attn_implementation: eager") from e
    return hf


def stock_attention(hf) -> bool:
    """Give a model loaded by `load_model` its stock attention back (what transformers chose: SDPA can
    then skip the mask for causal prompts and pick its flash kernel). The runner calls it before every
    cell that injects nothing; a K/V cell switches to the memory-bias attention again on first use.
    -> whether it switched. A model built by hand (no recorded kernel) is left as it is."""
    stock = getattr(hf, STOCK_ATTR, None)
    current = getattr(hf.config, "_attn_implementation", None)
    if not stock or current == stock:
        return False
    hf.set_attn_implementation(stock)
    return True


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

    @property
    def nbytes(self) -> int:
        """Bytes its keys and values hold (on whatever device they live)."""
        return sum(t.numel() * t.element_size() for pair in self.layers for t in pair)


def _hf(model, inject: bool = True):
    """The transformers model and tokenizer behind a ChatModel; with `inject`, refuses a model that
    cannot take K/V memories (no K/V access, or an architecture `check_support` refuses)."""
    if not isinstance(model, KVModel) or not model.supports_kv or model.model is None:
        raise KVUnsupportedError(f"K/V memory injection needs a local transformers model; {model!r} has no K/V "
                                 "access (an OpenAI-compatible endpoint only returns text)")
    if inject:
        check_support(model.model)
    return model.model, model.tokenizer


_SUPPORTED_LAYERS = {"full_attention", "sliding_attention"}
_REFUSED_ROPE = {"dynamic": "dynamic NTK RoPE changes its frequencies with the sequence length",
                 "longrope": "LongRoPE switches its frequency factors with the sequence length"}


@dataclass(frozen=True)
class _Rope:
    rotary: Any  # the model's rotary embedding module
    apply: Any  # its apply_rotary_pos_emb function
    layer_types: tuple[str, ...] | None
    takes_layer_type: bool


def _rope_types(config) -> set[str]:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return {str(v.get("rope_type", v.get("type", "default"))) for v in params.values()}
    return {str(params.get("rope_type", params.get("type", "default")))} if isinstance(params, dict) else {"default"}


def check_support(hf) -> _Rope:
    """What K/V injection needs from a transformers model, or KVUnsupportedError naming the architecture
    and the reason: a memory-bias attention implementation, RoPE (a memory sits at negative positions;
    learned or absolute positions cannot go below 0) with fixed frequencies, and only full or
    sliding-window attention layers (chunked, linear or recurrent layers cannot hold a prefix block)."""
    arch = f"{type(hf).__name__} (model_type {getattr(hf.config, 'model_type', '?')!r})"
    impl = getattr(hf.config, "_attn_implementation", None)
    if impl not in (ATTN_IMPLEMENTATION, ATTN_IMPLEMENTATION_EAGER) and getattr(hf, STOCK_ATTR, None):
        prepare_model(hf)  # loaded by dkilab with the stock kernel: switched on the first K/V use
        impl = hf.config._attn_implementation
    if impl not in (ATTN_IMPLEMENTATION, ATTN_IMPLEMENTATION_EAGER):  # checked every time: it can be switched
        raise KVUnsupportedError(f"{arch} runs attention {impl!r}; K/V injection needs the memory-bias attention: "
                                 "load it with dkilab.models.load_model or call dkilab.models.kv.prepare_model(model)")
    cached = getattr(hf, "_dkilab_rope", None)
    if cached is not None:
        return cached
    base = getattr(hf, "model", hf)
    rotary = getattr(base, "rotary_emb", None)
    apply = getattr(sys.modules[type(base).__module__], "apply_rotary_pos_emb", None)
    if rotary is None or apply is None:
        raise KVUnsupportedError(f"{arch} has no rotary position embedding: its positions cannot go below 0, so a "
                                 "memory block cannot be placed before the prompt")
    refused = {t: why for t, why in _REFUSED_ROPE.items() if t in _rope_types(hf.config)}
    if refused:
        raise KVUnsupportedError(f"{arch}: {'; '.join(refused.values())}, so a memory block's keys cannot be "
                                 "moved to another position")
    layer_types = getattr(hf.config, "layer_types", None)
    if layer_types and set(layer_types) - _SUPPORTED_LAYERS:
        raise KVUnsupportedError(f"{arch} has {sorted(set(layer_types) - _SUPPORTED_LAYERS)} layers; K/V "
                                 "injection supports full and sliding-window attention layers only")
    takes = "layer_type" in inspect.signature(rotary.forward).parameters
    rope = _Rope(rotary, apply, tuple(layer_types) if layer_types else None, takes)
    hf._dkilab_rope = rope
    return rope


def cache_kwarg(hf, cache) -> dict:
    """The K/V cache as the model's forward takes it: `cache` (transformers >= 5.2x; `past_key_values` there
    is deprecated, with a FutureWarning on every call) or `past_key_values` (earlier releases)."""
    forward = type(hf).forward
    name = _CACHE_KWARG.get(forward)
    if name is None:
        takes_cache = "cache" in inspect.signature(forward).parameters
        name = _CACHE_KWARG[forward] = "cache" if takes_cache else "past_key_values"
    return {name: cache}


_CACHE_KWARG: dict = {}


@torch.inference_mode()
def encode_memory(model, text: str) -> MemoryKV:
    """Encode `text` (tokenised exactly as given, no special tokens added) into K/V at -m..-1."""
    _, tok = _hf(model)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("encode_memory got an empty memory text")
    return encode_memory_ids(model, ids, text)


@torch.inference_mode()
def encode_memory_ids(model, ids: list[int], text: str = "") -> MemoryKV:
    """`encode_memory` on token ids already made (the GPU bench encodes random ids at real scale)."""
    from transformers import DynamicCache

    hf, tok = _hf(model)
    sink = sink_token_id(tok)
    t = time.perf_counter()
    cache = DynamicCache()  # full layers everywhere: a sliding layer must keep the whole block (masks do the window)
    device = hf.get_input_embeddings().weight.device
    pos = torch.arange(-len(ids) - 1, 0, device=device).unsqueeze(0)
    hf(input_ids=torch.tensor([[sink, *ids]], device=device), position_ids=pos, use_cache=True, logits_to_keep=1,
       **cache_kwarg(hf, cache))  # the cache is what it is for: the vocabulary projection of one position only
    layers = [(layer.keys.detach().clone(), layer.values.detach().clone())  # type: ignore[union-attr]  # full layers
              for layer in cache.layers]
    return MemoryKV(text, ids, sink, layers, (time.perf_counter() - t) * 1000)


def sink_token_id(tokenizer) -> int:
    """The token a memory is encoded behind: BOS, else EOS (what starts a document in training)."""
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    raise TypeError("the tokenizer has neither a BOS nor an EOS token to use as attention sink")


def _shift_keys(hf, layer: int, keys: torch.Tensor, delta: int) -> torch.Tensor:
    """Keys rotated by RoPE at position p re-rotated to p + delta (exact: rotations compose), with the
    layer's own rotary (Gemma 3: local/global) and its own apply function (partial, interleaved)."""
    if delta == 0:
        return keys
    rope = check_support(hf)
    layer_type = rope.layer_types[layer] if rope.layer_types else None
    inv = next((b for b in rope.rotary.buffers()), None)
    device = inv.device if inv is not None else keys.device
    x = torch.zeros(1, device=device, dtype=torch.float32)
    pos = torch.tensor([[delta]], device=device)
    cos, sin = rope.rotary(x, pos, layer_type) if rope.takes_layer_type else rope.rotary(x, pos)
    scaling = getattr(rope.rotary, f"{layer_type}_attention_scaling", None) if layer_type else None
    scaling = scaling or getattr(rope.rotary, "attention_scaling", 1.0) or 1.0  # YaRN scales cos/sin: undo it
    cos, sin = (cos.float() / scaling).to(keys.device), (sin.float() / scaling).to(keys.device)
    k = keys.float()
    return rope.apply(k, k, cos, sin)[1].to(keys.dtype)


def build_cache(model, memories):
    """A fresh DynamicCache: one sink column, then the memory blocks side by side; and the bias.

    `memories`: [(MemoryKV, alpha), ...]. Every block keeps its place whatever its alpha (an alpha of
    0 gives its columns a bias of -inf: no weight at all), and the sink is always there. So alpha -> 0
    converges to alpha = 0, which is the K/V strategies' no-memory baseline: the prompt after a lone
    sink at the memory's start (no information from any block reaches the prompt), and changing one
    block's alpha never moves another block. A sink's K/V depend only on its position, so the first
    block's serves, moved to the front. Returns (cache or None, bias or None, injected columns: the
    sink plus the blocks with alpha > 0); no memories at all -> (None, None, 0): the plain prompt.
    """
    from transformers import DynamicCache

    hf, _ = _hf(model, inject=bool(memories))
    blocks = []
    for mem, alpha in memories or []:
        if not isinstance(mem, MemoryKV):
            raise TypeError(f"memories must be (MemoryKV, alpha) pairs, got {type(mem).__name__}")
        if alpha < 0 or not math.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
        blocks.append((mem, float(alpha)))
    if not blocks:
        return None, None, 0
    first = blocks[0][0]
    total = 1 + sum(m.n_tokens for m, _ in blocks)
    cache = DynamicCache()
    for i in range(len(first.layers)):
        k0, v0 = first.layers[i]
        keys = [_shift_keys(hf, i, k0[..., :1, :], first.n_tokens + 1 - total)]  # the sink, to -total
        values = [v0[..., :1, :]]
        after = total - 1
        for mem, _ in blocks:
            after -= mem.n_tokens  # tokens of later blocks: this block ends that far left of 0
            k, v = mem.layers[i]
            keys.append(_shift_keys(hf, i, k[..., 1:, :], -after))
            values.append(v[..., 1:, :])
        cache.update(torch.cat(keys, dim=-2), torch.cat(values, dim=-2), i)  # cat copies: stored blocks untouched
    bias = torch.cat([torch.zeros(1), *(torch.full((m.n_tokens,), math.log(a) if a > 0 else -math.inf)
                                        for m, a in blocks)])
    return cache, bias, 1 + sum(m.n_tokens for m, a in blocks if a > 0)


@torch.inference_mode()
def prefill(model, prompt_ids: list[int], memories=None):
    """Run the prompt after the memory blocks -> (logits of the last position, cache, bias, injected)."""
    hf, _ = _hf(model, inject=bool(memories))
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    cache, bias, injected = build_cache(model, memories)
    if cache is None:
        from transformers import DynamicCache

        cache = DynamicCache(config=hf.config)
    kwargs = {"memory_bias": bias} if bias is not None else {}
    device = hf.get_input_embeddings().weight.device
    out = hf(input_ids=torch.tensor([prompt_ids], device=device),
             position_ids=torch.arange(len(prompt_ids), device=device).unsqueeze(0),
             use_cache=True, logits_to_keep=1, **cache_kwarg(hf, cache), **kwargs)  # the last position's only
    return out.logits[0, -1].float(), cache, bias, injected


def next_token_logits(model, prompt_text: str, memories=()) -> torch.Tensor:
    """Logits for the token after `prompt_text` (tokenised exactly as given) with K/V memories."""
    _, tok = _hf(model, inject=False)
    logits, _, _, _ = prefill(model, tok(prompt_text, add_special_tokens=False)["input_ids"], list(memories))
    return logits


@torch.inference_mode()
def decode(model, prompt_ids: list[int], memories=None, max_new_tokens: int = 64, temperature: float = 0.0,
           stop: list[str] | None = None, seed: int | None = None) -> tuple[list[int], int]:
    """Greedy (temperature 0) or sampled decoding after the memories -> (new token ids, injected tokens)."""
    hf, tok = _hf(model, inject=bool(memories))
    device = hf.get_input_embeddings().weight.device
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
        out = hf(input_ids=torch.tensor([[nxt]], device=device), position_ids=torch.tensor([[pos]], device=device),
                 use_cache=True, **cache_kwarg(hf, cache), **kwargs)
        logits = out.logits[0, -1].float()
        pos += 1
    return new, injected
