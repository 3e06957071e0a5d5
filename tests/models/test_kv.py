"""K/V memory injection on the real offline SmolLM2 (fp32): the properties docs/architecture.md §2 (K/V
injection) asks for."""
import pytest
import torch
from dkilab.models import encode_memory, next_token_logits

MEMORY = "Earlier the user said: my cat is called Pixel and she is grey.\n"
PROMPT = "<|im_start|>user\nWhat is my cat called?<|im_end|>\n<|im_start|>assistant\nYour cat is called"


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    return float(torch.sum(torch.softmax(p, -1) * (torch.log_softmax(p, -1) - torch.log_softmax(q, -1))))


@pytest.fixture(scope="module")
def mem(model):
    return encode_memory(model, MEMORY)


def sink_only(model, mem):
    """The K/V no-memory baseline: the prompt after a lone sink at the memory's start position."""
    ids = [mem.sink_id, *model.encode(PROMPT)]
    with torch.inference_mode():
        return model.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor(
            [[-mem.n_tokens - 1, *range(len(ids) - 1)]])).logits[0, -1]


def test_alpha_zero_is_the_sink_only_baseline_and_continuous(model, mem):
    zero = next_token_logits(model, PROMPT, [(mem, 0.0)])
    assert float((zero - sink_only(model, mem)).abs().max()) <= 1e-4
    # continuity: a tiny alpha lands next to alpha = 0 (KL 0.069 when alpha = 0 dropped the sink). Not
    # at 0: a few memory columns score ~18 nats above the rest in some heads, so alpha scales them
    # back to parity only below ~1e-8; the limit itself is exact
    assert kl(next_token_logits(model, PROMPT, [(mem, 1e-4)]), zero) < 0.01
    assert kl(next_token_logits(model, PROMPT, [(mem, 1e-30)]), zero) < 1e-6
    assert model.generate(PROMPT, 8, memories=[(mem, 0.0)]) == model.generate(PROMPT, 8, memories=[(mem, 1e-30)])


def test_alpha_one_equals_memory_text_in_front(model, mem):
    ids = [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)]
    with torch.inference_mode():
        ref = model.model(input_ids=torch.tensor([ids])).logits[0, -1]
    got = next_token_logits(model, PROMPT, [(mem, 1.0)])
    assert float((got - ref).abs().max()) <= 1e-3
    assert "Pixel" in model.generate(PROMPT, 6, memories=[(mem, 1.0)])
    assert "Pixel" not in model.generate(PROMPT, 6)  # the answer really comes from the memory


def test_intermediate_alpha_moves_monotonically_between_the_ends(model, mem):
    base, full = next_token_logits(model, PROMPT, [(mem, 0.0)]), next_token_logits(model, PROMPT, [(mem, 1.0)])
    pixel = model.encode(" Pixel")[0]
    rows = []
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        logits = next_token_logits(model, PROMPT, [(mem, alpha)])
        rows.append((kl(logits, base), kl(logits, full), float(torch.softmax(logits, -1)[pixel])))
    to_base, to_full, p_pixel = zip(*rows)
    assert list(to_base) == sorted(to_base) and list(to_full) == sorted(to_full, reverse=True), rows
    assert list(p_pixel) == sorted(p_pixel) and p_pixel[-1] > 0.5 > p_pixel[0], rows


def test_stored_memory_is_reused_unchanged(model, mem):
    before = [(k.clone(), v.clone()) for k, v in mem.layers]
    first = next_token_logits(model, PROMPT, [(mem, 0.6)])
    model.generate(PROMPT, 4, memories=[(mem, 0.6)])
    assert torch.equal(next_token_logits(model, PROMPT, [(mem, 0.6)]), first)
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(mem.layers, before))


def test_several_blocks_each_with_its_own_alpha(model, mem):
    other = encode_memory(model, "The user lives in Lisbon.\n")
    base = next_token_logits(model, PROMPT)
    # a block at alpha 0 keeps its place but gives nothing: its text does not matter
    same_len = encode_memory(model, "The user lives in Madrid.\n")
    assert same_len.n_tokens == other.n_tokens
    assert torch.allclose(next_token_logits(model, PROMPT, [(other, 0.0), (mem, 1.0)]),
                          next_token_logits(model, PROMPT, [(same_len, 0.0), (mem, 1.0)]), atol=1e-5)
    both = next_token_logits(model, PROMPT, [(other, 1.0), (mem, 1.0)])
    pixel = model.encode(" Pixel")[0]
    assert torch.softmax(both, -1)[pixel] > 0.5 > float(torch.softmax(base, -1)[pixel])
    # the Lisbon block sits before the cat block: same as the texts in that order, except that the
    # cat block was encoded on its own (it never attended to the Lisbon block)
    ids = [mem.sink_id, *other.token_ids, *mem.token_ids, *model.encode(PROMPT)]
    with torch.inference_mode():
        ref = model.model(input_ids=torch.tensor([ids])).logits[0, -1]
    assert kl(both, ref) < 0.2


def test_bad_alpha_and_bad_memory_are_refused(model, mem):
    with pytest.raises(ValueError, match="alpha"):
        next_token_logits(model, PROMPT, [(mem, -0.5)])
    with pytest.raises(TypeError, match="MemoryKV"):
        next_token_logits(model, PROMPT, [("some text", 1.0)])
    with pytest.raises(ValueError, match="empty"):
        encode_memory(model, "")


def test_alpha_curve_matches_the_direct_computation(model, mem):
    from dkilab.models.kv_probe import Probe, alpha_curve

    base, full = next_token_logits(model, PROMPT, [(mem, 0.0)]), next_token_logits(model, PROMPT, [(mem, 1.0)])
    half = next_token_logits(model, PROMPT, [(mem, 0.5)])
    rows = alpha_curve(model, [Probe(MEMORY, PROMPT, " Pixel", "cat")], [0.0, 0.5, 1.0])
    assert [r["alpha"] for r in rows] == [0.0, 0.5, 1.0] and rows[0]["kl_to_none"] == 0 and rows[2]["kl_to_full"] == 0
    assert rows[1]["kl_to_none"] == pytest.approx(kl(half, base), rel=1e-3, abs=1e-5)
    assert rows[1]["kl_to_full"] == pytest.approx(kl(half, full), rel=1e-3, abs=1e-5)
    first = model.encode(" Pixel")[0]  # p(answer) is teacher-forced over all its tokens, so below p(first token)
    assert rows[2]["p_answer"] > rows[0]["p_answer"] and rows[2]["answer_logprob"] <= float(torch.log_softmax(full,
                                                                                                              -1)[first])
    with pytest.raises(ValueError, match="at least one probe"):
        alpha_curve(model, [], [0.5])


def test_projecting_only_the_read_positions_keeps_the_full_forwards_logits(model):
    """prefill and the probe's teacher forcing project the vocabulary for the positions they read only
    (`logits_to_keep`): the same logits as the whole forward's, to fp32 rounding, and the same next token."""
    from dkilab.models.kv import prefill
    from dkilab.models.kv_probe import _score

    prompt = model.encode(PROMPT * 6)  # a few hundred tokens, where a row-count-dependent kernel could differ
    answer = model.encode(" Pixel, and she is grey")
    with torch.inference_mode():
        whole = model.model(input_ids=torch.tensor([prompt + answer])).logits[0].float()
    last, *_ = prefill(model, prompt)
    reference = whole[len(prompt) - 1]
    assert float((last - reference).abs().max()) < 1e-4 and int(last.argmax()) == int(reference.argmax())
    logp, answer_logprob = _score(model, prompt, answer, None)
    full = torch.log_softmax(whole, -1)
    expected = sum(float(full[len(prompt) - 1 + i, t]) for i, t in enumerate(answer))
    assert float((logp - full[len(prompt) - 1]).abs().max()) < 1e-4
    assert answer_logprob == pytest.approx(expected, abs=1e-3)


def test_encoding_a_memory_builds_no_autograd_graph(model):
    """encode_memory, prefill and decode run under torch.inference_mode (no graph kept per token: memory
    and time). A helper added above encode_memory once took its decorator, and the memory forward ran with
    autograd on; the model's forward now records the mode it ran in."""
    from dkilab.models.kv import _hf, decode

    seen = []
    hf, _ = _hf(model)
    handle = hf.register_forward_hook(lambda *_: seen.append(torch.is_inference_mode_enabled()))
    try:
        encode_memory(model, MEMORY)
        assert seen == [True]
        decode(model, model.encode(PROMPT), [(encode_memory(model, MEMORY), 1.0)], max_new_tokens=2)
    finally:
        handle.remove()
    assert len(seen) >= 3 and all(seen), seen
