"""What alpha does to the model, measured on probes: for a memory text, a prompt and the answer the
memory supports, the next-token distribution after the prompt and the gold answer's probability at each
alpha, against the two ends (alpha 0: the K/V no-memory baseline; alpha 1: the memory text in front).

    rows = alpha_curve(model, [Probe("my cat is called Pixel.", prompt, " Pixel")], [0, 0.25, 0.5, 1])
    # -> [{"probe", "alpha", "kl_to_none", "kl_to_full", "p_answer", "answer_logprob"}, ...]

`kl_to_none` = KL(p_alpha || p_0) and `kl_to_full` = KL(p_alpha || p_1) in nats over the next token;
`p_answer` is the gold answer's mean per-token probability (teacher-forced, the geometric mean, so
answers of different lengths compare) and `answer_logprob` its total log probability.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dkilab.models.kv import _hf, build_cache, cache_kwarg, encode_memory


@dataclass
class Probe:
    memory: str  # the memory text injected as K/V
    prompt: str  # the visible prompt, chat template included, tokenised exactly as given
    answer: str  # the continuation the memory supports
    name: str = ""


@torch.inference_mode()
def _score(model, prompt_ids: list[int], answer_ids: list[int], memories) -> tuple[torch.Tensor, float]:
    """(log-probs of the token after the prompt, total log prob of the answer) after the memory blocks."""
    hf, _ = _hf(model, inject=bool(memories))
    cache, bias, _ = build_cache(model, memories)
    ids = prompt_ids + answer_ids
    device = hf.get_input_embeddings().weight.device
    kwargs = {"memory_bias": bias} if bias is not None else {}
    keep = len(answer_ids) + 1  # logits from the prompt's last position on
    out = hf(input_ids=torch.tensor([ids], device=device), position_ids=torch.arange(len(ids), device=device)[None],
             use_cache=cache is not None, logits_to_keep=keep, **cache_kwarg(hf, cache), **kwargs)
    logp = torch.log_softmax(out.logits[0, -keep:].float(), -1)
    answer = logp[:-1].gather(1, torch.tensor(answer_ids, device=device)[:, None]).sum()
    return logp[0], float(answer)


def _kl(logp: torch.Tensor, logq: torch.Tensor) -> float:
    return max(0.0, float(torch.sum(logp.exp() * (logp - logq))))


def alpha_curve(model, probes: list[Probe], alphas: list[float]) -> list[dict]:
    """One row per probe and alpha (see the module doc). The ends 0 and 1 are always computed."""
    if not probes:
        raise ValueError("alpha_curve needs at least one probe")
    rows = []
    for i, probe in enumerate(probes):
        name = probe.name or f"probe {i}"
        prompt_ids, answer_ids = model.encode(probe.prompt), model.encode(probe.answer)
        if not prompt_ids or not answer_ids:
            raise ValueError(f"{name}: the prompt and the answer must both have tokens")
        mem = encode_memory(model, probe.memory)
        none, _ = _score(model, prompt_ids, answer_ids, [(mem, 0.0)])
        full, _ = _score(model, prompt_ids, answer_ids, [(mem, 1.0)])
        for alpha in alphas:
            logp, answer = _score(model, prompt_ids, answer_ids, [(mem, float(alpha))])
            rows.append({"probe": name, "alpha": float(alpha), "kl_to_none": _kl(logp, none),
                         "kl_to_full": _kl(logp, full), "answer_logprob": answer,
                         "p_answer": float(torch.tensor(answer / len(answer_ids)).exp())})
    return rows
