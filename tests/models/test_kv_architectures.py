"""K/V injection on tiny random-weight models of every common architecture (offline, fixed seed),
in eager and SDPA attention: the alpha properties of docs/architecture.md §2 (K/V injection) hold for each, or
the model is refused with an error naming the architecture and the reason."""
import pytest
import torch
from dkilab.models.chat import TransformersChatModel
from dkilab.models.kv import KVUnsupportedError, encode_memory, next_token_logits, prepare_model

from tests.models.tiny import ARCHITECTURES, tiny_model

MEMORY = "earlier the user said my cat is called pixel and she is grey . she lives in lisbon ."
OTHER = "the user likes tea and red books ."
PROMPT = "what is my cat called ? your cat is called"


def kl(p, q) -> float:
    return float(torch.sum(torch.softmax(p, -1) * (torch.log_softmax(p, -1) - torch.log_softmax(q, -1))))


def chat_model(arch, attn, dtype="float32"):
    hf, tok = tiny_model(arch, attn="eager" if attn == "eager" else "sdpa", dtype=dtype)
    prepare_model(hf, attn)
    return TransformersChatModel(hf, tok, name=f"tiny-{arch}-{attn}")


def forward_last(model, ids):
    with torch.inference_mode():
        return model.model(input_ids=torch.tensor([ids])).logits[0, -1].float()


NO_SDPA = {"gemma2"}  # transformers runs Gemma 2 in eager only (attention soft-capping)
MATRIX = [(a, k) for a in ARCHITECTURES for k in ("eager", "sdpa") if not (k == "sdpa" and a in NO_SDPA)]


@pytest.fixture(scope="module", params=MATRIX, ids=lambda p: f"{p[0]}-{p[1]}")
def arch_model(request):
    arch, attn = request.param
    model = chat_model(arch, attn)
    return model, encode_memory(model, MEMORY)


SAME_LENGTH = "earlier the user said my dog is called paris and she is red . she lives in lisbon ."


def test_alpha_zero_is_the_sink_only_baseline(arch_model):
    model, mem = arch_model
    got = next_token_logits(model, PROMPT, [(mem, 0.0)])
    # no information from the memory reaches the prompt: another text of the same length gives the same logits
    other = encode_memory(model, SAME_LENGTH)
    assert other.n_tokens == mem.n_tokens and other.token_ids != mem.token_ids
    assert float((next_token_logits(model, PROMPT, [(other, 0.0)]) - got).abs().max()) <= 1e-5
    if not getattr(model.model.config, "sliding_window", None):  # = the prompt after a lone sink at -(m+1)
        ids = [mem.sink_id, *model.encode(PROMPT)]
        with torch.inference_mode():
            ref = model.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor(
                [[-mem.n_tokens - 1, *range(len(ids) - 1)]])).logits[0, -1]
        assert float((got - ref).abs().max()) <= 1e-4
    # and the family is continuous at 0: a tiny alpha is next to alpha = 0
    assert kl(next_token_logits(model, PROMPT, [(mem, 1e-4)]), got) < 1e-4


def test_alpha_one_equals_memory_text_in_front(arch_model):
    model, mem = arch_model
    ref = forward_last(model, [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)])
    got = next_token_logits(model, PROMPT, [(mem, 1.0)])
    assert float((got - ref).abs().max()) <= 1e-3
    assert model.generate(PROMPT, 5, memories=[(mem, 1.0)]) == model.tokenizer.decode(
        _greedy(model, [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)], 5), skip_special_tokens=True).strip()


def _greedy(model, ids, n):
    out = []
    with torch.inference_mode():
        for _ in range(n):
            nxt = int(torch.argmax(model.model(input_ids=torch.tensor([ids + out])).logits[0, -1]))
            if nxt in model.eos_token_ids:
                break
            out.append(nxt)
    return out


def test_intermediate_alpha_moves_monotonically(arch_model):
    model, mem = arch_model
    base = next_token_logits(model, PROMPT, [(mem, 0.0)])
    full = next_token_logits(model, PROMPT, [(mem, 1.0)])
    rows = [(kl(lg, base), kl(lg, full)) for lg in
            (next_token_logits(model, PROMPT, [(mem, a)]) for a in (0.0, 0.25, 0.5, 0.75, 1.0))]
    to_base, to_full = zip(*rows)
    assert list(to_base) == sorted(to_base) and list(to_full) == sorted(to_full, reverse=True), rows


def test_several_blocks_each_with_its_own_alpha(arch_model):
    model, mem = arch_model
    other = encode_memory(model, OTHER)
    # the first block is moved left by the second's length (its keys re-rotated, not recomputed): with the
    # blocks [other, mem] and mem at alpha 1, that equals the texts in that order except that mem was
    # encoded without seeing `other`; compare with `other` at alpha 1 and mem at 0 against a forward pass
    # where `other` sits m tokens further left (position ids) and mem's columns are absent
    only = next_token_logits(model, PROMPT, [(other, 1.0), (mem, 0.0)])
    if not getattr(model.model.config, "sliding_window", None):
        n, m, p = other.n_tokens, mem.n_tokens, model.encode(PROMPT)
        ids = [mem.sink_id, *other.token_ids, *p]
        with torch.inference_mode():
            ref = model.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor(
                [[*range(-n - m - 1, -m), *range(len(p))]])).logits[0, -1]
        assert float((only - ref).abs().max()) <= 1e-3
    both = next_token_logits(model, PROMPT, [(other, 1.0), (mem, 1.0)])
    half = next_token_logits(model, PROMPT, [(other, 1.0), (mem, 0.5)])
    assert kl(half, only) < kl(both, only) and kl(half, both) < kl(only, both)
    # each block's alpha acts alone: turning `other` off moves the output from both blocks towards mem alone
    # (Mistral's window, shorter than mem + prompt, hides `other` from every layer: then both are equal)
    mem_only = next_token_logits(model, PROMPT, [(mem, 1.0)])
    off = kl(next_token_logits(model, PROMPT, [(other, 0.0), (mem, 1.0)]), mem_only)
    hidden = model.model.config.model_type == "mistral"
    assert off <= kl(both, mem_only) + 1e-7 if hidden else off < kl(both, mem_only)


def test_blocks_are_reused_unchanged(arch_model):
    model, mem = arch_model
    before = [(k.clone(), v.clone()) for k, v in mem.layers]
    first = next_token_logits(model, PROMPT, [(mem, 0.6)])
    model.generate(PROMPT, 3, memories=[(mem, 0.6)])
    assert torch.equal(next_token_logits(model, PROMPT, [(mem, 0.6)]), first)
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(mem.layers, before))


@pytest.mark.parametrize("arch", sorted(NO_SDPA))
def test_sdpa_on_an_eager_only_architecture_is_refused_by_name(arch):
    hf, _ = tiny_model(arch, attn="eager")
    with pytest.raises(KVUnsupportedError, match=rf"Gemma2ForCausalLM.*{arch}.*sdpa.*use attn_implementation: eager"):
        prepare_model(hf, "sdpa")


def test_sliding_window_really_cuts_in_the_tiny_configs():
    """The matrix means something for sliding-window families: memory + prompt exceed the window."""
    model = chat_model("gemma2", "eager")
    assert len(model.encode(MEMORY)) + len(model.encode(PROMPT)) > model.model.config.sliding_window


def test_bf16_keeps_bias_and_positions():
    model = chat_model("llama", "sdpa", dtype="bfloat16")
    mem = encode_memory(model, MEMORY)
    assert mem.layers[0][0].dtype == torch.bfloat16
    ref = forward_last(model, [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)])
    got = next_token_logits(model, PROMPT, [(mem, 1.0)])
    assert kl(got, ref) < 1e-2  # bf16 rounding, not a misplaced block
    assert float((next_token_logits(model, PROMPT, [(mem, 0.0)]) -
                  forward_last(model, [mem.sink_id, *model.encode(PROMPT)])).abs().max()) < 0.1


def test_device_auto_and_bf16_through_load_model(tmp_path):
    from dkilab.models import load_model

    hf, tok = tiny_model("qwen3")
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model = load_model(str(tmp_path), dtype="bf16", device="auto")
    assert model.model.dtype == torch.bfloat16 and model.model.device.type == "cpu"
    mem = encode_memory(model, MEMORY)
    ref = forward_last(model, [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)])
    assert kl(next_token_logits(model, PROMPT, [(mem, 1.0)]), ref) < 1e-2


def test_architecture_without_rope_is_refused_by_name():
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.models.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    cfg = AutoConfig.for_model("gpt2", vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    hf = prepare_model(AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa"))
    model = TransformersChatModel(hf, tok, name="tiny-gpt2")
    with pytest.raises(KVUnsupportedError, match=r"GPT2LMHeadModel.*'gpt2'.*rotary"):
        encode_memory(model, MEMORY)
    assert model.generate(PROMPT, 2) is not None  # text generation still works


def test_dynamic_rope_is_refused_with_the_reason():
    hf, tok = tiny_model("llama")
    hf.config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    model = TransformersChatModel(prepare_model(hf), tok, name="tiny-llama-dynamic")
    with pytest.raises(KVUnsupportedError, match="dynamic NTK"):
        encode_memory(model, MEMORY)


def test_model_without_the_memory_attention_is_refused():
    hf, tok = tiny_model("llama", attn="sdpa")
    with pytest.raises(KVUnsupportedError, match="prepare_model"):
        encode_memory(TransformersChatModel(hf, tok, name="plain"), MEMORY)
