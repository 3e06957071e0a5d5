"""Batched K/V decoding: questions with different memory blocks decoded together, token for token what
`dkilab.models.kv.decode` gives each one alone.

Layout of row b in the batch cache: [padding | sink + its blocks | padding | its prompt | generated].
- Each row's cache comes from `kv.build_cache` (its blocks already rotated to -M_b..-1 before its own
  prompt), left padded to the longest row's memory columns; its prompt is left padded to the longest prompt.
- Padding columns are masked by the 2D attention mask (transformers turns it into the float mask);
  the memory bias (log alpha) is per row, over the memory columns only.
- Positions are per row: the prompt at 0..P_b-1 and generated tokens after it, as alone, so RoPE sees the
  same offsets between every query and key.
- Padding moves a row's real columns apart, which a full-attention layer never sees. A sliding-window
  layer would (its window counts columns), so a model with one decodes in a batch only when the
  longest row never reaches past its window; otherwise one question at a time.
"""
from __future__ import annotations

import torch

from dkilab.models.kv import _hf, build_cache, cache_kwarg, decode


def sliding_window(config) -> int | None:
    """The window of the model's sliding-attention layers, or None when it has none."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not window or getattr(config, "use_sliding_window", None) is False or (types and "sliding_attention"
                                                                                not in types):
        return None
    return int(window)


def _memory_columns(cache) -> int:
    return 0 if cache is None else int(cache.layers[0].keys.shape[-2])  # full layers


@torch.inference_mode()
def decode_many(model, requests: list[tuple[list[int], list | None]], max_new_tokens: int = 64,
                stop: list[str] | None = None) -> list[tuple[list[int], int]]:
    """Greedy decoding of several (prompt ids, memories) together -> per request (new token ids, injected
    tokens), equal to `kv.decode(model, ids, memories, max_new_tokens, stop=stop)` for each alone."""
    from transformers import DynamicCache

    if not requests:
        return []
    for prompt_ids, _ in requests:
        if not prompt_ids:
            raise ValueError("the prompt is empty")
    hf, tok = _hf(model, inject=any(m for _, m in requests))
    built = [build_cache(model, memories) for _, memories in requests]
    mem = max(_memory_columns(c) for c, _, _ in built)
    longest = max(len(ids) for ids, _ in requests)
    window = sliding_window(hf.config)
    if len(requests) == 1 or (window is not None and mem + longest + max_new_tokens > window):
        return [decode(model, ids, memories, max_new_tokens, stop=stop) for ids, memories in requests]

    device = hf.get_input_embeddings().weight.device
    pad = tok.pad_token_id if tok.pad_token_id is not None else (model.eos_token_ids or [0])[0]
    n = len(requests)
    cache = DynamicCache(config=hf.config) if mem == 0 else _stack(built, mem)
    bias = None
    if mem:
        bias = torch.zeros(n, mem)
        for b, (_, row_bias, _) in enumerate(built):
            if row_bias is not None:
                bias[b, mem - row_bias.shape[0]:] = row_bias
    mask = torch.zeros(n, mem + longest, dtype=torch.long, device=device)
    tokens = torch.full((n, longest), int(pad), dtype=torch.long, device=device)
    pos = torch.zeros(n, longest, dtype=torch.long, device=device)
    for b, ((prompt, _), (c, _, _)) in enumerate(zip(requests, built)):
        m, p = _memory_columns(c), len(prompt)
        mask[b, mem - m:mem] = 1
        mask[b, mem + longest - p:] = 1
        tokens[b, longest - p:] = torch.tensor(prompt, device=device)
        pos[b, longest - p:] = torch.arange(p, device=device)
    kwargs = {"memory_bias": bias} if bias is not None else {}
    out = hf(input_ids=tokens, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
             **cache_kwarg(hf, cache), **kwargs)
    logits = out.logits[:, -1].float()
    eos = set(model.eos_token_ids)
    new: list[list[int]] = [[] for _ in requests]
    done = [False] * n
    nxt_pos = torch.tensor([len(p) for p, _ in requests], device=device)
    for _ in range(max_new_tokens):
        chosen = torch.argmax(logits, dim=-1).tolist()
        for b, t in enumerate(chosen):
            if done[b]:
                continue
            if t in eos:
                done[b] = True
                continue
            new[b].append(t)
            if stop and any(s in tok.decode(new[b][-16:], skip_special_tokens=True) for s in stop):
                done[b] = True
        if all(done):
            break
        mask = torch.cat([mask, torch.ones(n, 1, dtype=mask.dtype, device=device)], dim=1)
        out = hf(input_ids=torch.tensor([[t] for t in chosen], device=device), attention_mask=mask,
                 position_ids=nxt_pos.unsqueeze(1), use_cache=True, **cache_kwarg(hf, cache), **kwargs)
        logits = out.logits[:, -1].float()
        nxt_pos = nxt_pos + 1
    return [(row, injected) for row, (_, _, injected) in zip(new, built)]


def _stack(built, mem: int):
    """One DynamicCache holding every row's memory columns, each row left padded (zeros) to `mem`."""
    from transformers import DynamicCache

    cache = DynamicCache()
    reference = next(c for c, _, _ in built if c is not None)
    for i, layer in enumerate(reference.layers):
        keys, values = [], []
        for c, _, _ in built:
            k0, v0 = layer.keys, layer.values  # full layers
            if c is None:
                k, v = k0[..., :0, :], v0[..., :0, :]
            else:
                k, v = c.layers[i].keys, c.layers[i].values
            gap = mem - k.shape[-2]
            keys.append(torch.nn.functional.pad(k, (0, 0, gap, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, gap, 0)))
        cache.update(torch.cat(keys, dim=0), torch.cat(values, dim=0), i)
    return cache
