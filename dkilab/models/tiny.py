"""Tiny random-weight models of each common architecture, built offline from their config classes
(the K/V tests and `dkilab gpu`'s smoke stage: an architecture checked without downloading it).

No download: `AutoConfig.for_model(model_type, **small sizes)` + `AutoModelForCausalLM.from_config`
with a fixed seed, and a word-level tokenizer written here (BOS/EOS, a few hundred words).
"""
from __future__ import annotations

import string
from typing import Any

WORDS = ("the user said my cat is called pixel and she grey lives in lisbon what your earlier likes tea "
         "coffee dog name city question answer remember yesterday today we talked about a trip to paris "
         "on monday friday book red blue green car house work job sister brother mother father").split()
SPECIAL = ["<unk>", "<bos>", "<eos>", "<pad>", "<tool_call>", "</tool_call>"]

# small sizes shared by every family; per-family extras exercise what makes each one different
COMMON: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False)
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {"use_sliding_window": False},
    "qwen3": {},
    "mistral": {"sliding_window": 12},  # shorter than memory + prompt: the window really cuts
    "gemma2": {"sliding_window": 12, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
               "query_pre_attn_scalar": 16, "layer_types": ["sliding_attention", "full_attention"]},
    "gemma3_text": {"sliding_window": 12, "query_pre_attn_scalar": 16,
                    "layer_types": ["sliding_attention", "full_attention"]},
    "phi3": {"partial_rotary_factor": 0.5},  # rotary on half of each head
    "glm4": {"partial_rotary_factor": 0.5},  # interleaved rotary on half of each head
}


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS + list(string.punctuation) + [str(d) for d in range(10)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>")


def tiny_model(arch: str, attn: str = "eager", dtype: str = "float32", seed: int = 0, device: str = "cpu"):
    """(transformers model, tokenizer) for `arch` with random weights (fixed seed), on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = tiny_tokenizer()
    cfg = AutoConfig.for_model(arch, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                               **COMMON, **ARCHITECTURES[arch])
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=getattr(torch, dtype))
    model.to(device).eval()
    return model, tok
