"""Batched K/V decoding (`dkilab.models.kv_batch`): questions with different memory blocks, alphas and
prompt lengths decoded together give, token for token, what `kv.decode` gives each alone, on every tiny
architecture; and a model's `batch_size` batches concurrent K/V generations."""
import threading

import pytest
from dkilab.models import kv_batch
from dkilab.models.chat import TransformersChatModel
from dkilab.models.kv import decode, encode_memory, prepare_model
from dkilab.models.kv_batch import decode_many

from tests.models.tiny import ARCHITECTURES, tiny_model

BLOCKS = ("the user said my cat is called pixel and she is grey .", "we talked about a trip to paris on monday .",
          "my sister lives in lisbon .")
PROMPTS = ("what is my cat called ?", "where did we talk about a trip to paris on friday ? the city was",
           "red car", "the house is blue .", "what is my cat called ?")


def chat_model(arch: str, window: int | None = None) -> TransformersChatModel:
    hf, tok = tiny_model(arch, attn="eager" if arch == "gemma2" else "sdpa")
    if window:
        hf.config.sliding_window = window
    model = TransformersChatModel(prepare_model(hf), tok, name=f"tiny-{arch}")
    model.eos_token_ids = []  # random weights: decode every token
    return model


def requests(model) -> list:
    a, b, c = (encode_memory(model, t) for t in BLOCKS)
    memories = [[(a, 1.0)], [(b, 0.5), (c, 1.0)], None, [(c, 0.0)], [(a, 0.3), (b, 1.0)]]
    return [(model.encode(p), m) for p, m in zip(PROMPTS, memories)]


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_decode_many_equals_one_question_at_a_time(arch, monkeypatch):
    model = chat_model(arch, window=256)  # sliding layers: a window the batch fits in, so the batch runs
    reqs = requests(model)
    alone = [decode(model, ids, memories, 12) for ids, memories in reqs]
    monkeypatch.setattr(kv_batch, "decode", lambda *a, **k: pytest.fail("fell back to one at a time"))
    together = decode_many(model, reqs, 12)
    assert together == alone
    assert [injected for _, injected in together][2:4] == [0, 1]  # no memories; a block at alpha 0: the sink


def test_a_sliding_window_the_batch_would_stretch_decodes_one_at_a_time(monkeypatch):
    model = chat_model("mistral")  # window 12: padding would move real tokens out of each other's window
    reqs = requests(model)
    alone = [decode(model, ids, memories, 8) for ids, memories in reqs]
    calls = []
    real = kv_batch.decode
    monkeypatch.setattr(kv_batch, "decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert decode_many(model, reqs, 8) == alone and len(calls) == len(reqs)


def test_stop_strings_end_each_row_where_it_would_end_alone():
    model = chat_model("llama")
    reqs = requests(model)
    free = decode_many(model, reqs, 12)
    stop = [model.tokenizer.decode(free[1][0][3:4])]  # a word the second row says at its fourth token
    alone = [decode(model, ids, memories, 12, stop=stop) for ids, memories in reqs]
    assert decode_many(model, reqs, 12, stop=stop) == alone
    assert len(alone[1][0]) == 4


def test_concurrent_kv_generations_are_batched_and_get_their_own_answers(monkeypatch):
    model = chat_model("qwen2")
    reqs = requests(model)
    expected = [model.generate_full(PROMPTS[i], max_new_tokens=8, memories=reqs[i][1]).token_ids
                for i in range(len(reqs))]
    sizes = []
    real = kv_batch.decode_many

    def spy(model_, rows, *a, **kw):
        sizes.append(len(rows))
        return real(model_, rows, *a, **kw)

    monkeypatch.setattr(kv_batch, "decode_many", spy)
    monkeypatch.setattr(model, "batch_size", 8)
    got: list = [None] * len(reqs)
    start = threading.Barrier(len(reqs))

    def ask(i):
        start.wait()
        got[i] = model.generate_full(PROMPTS[i], max_new_tokens=8, memories=reqs[i][1]).token_ids

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == expected
    # the question without memories went to the text batch; the four with memories were coalesced
    assert max(sizes) > 1 and sum(sizes) == len(reqs) - 1
