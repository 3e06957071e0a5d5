"""Batched generation (left padding) is token for token what one prompt at a time gives, on the real
offline SmolLM2; the runner's `batch_size` coalesces concurrent questions into such batches."""
import threading

import pytest

PROMPTS = [[{"role": "user", "content": q}] for q in (
    "What is the capital of France?", "Name a fruit that is red.", "我的猫叫什么名字？",
    "How many legs does a spider have? Answer in one sentence, please, and explain why.", "天空是什么颜色？")]


def test_batched_equals_unbatched_token_for_token(model):
    single = [model.generate_full(p, max_new_tokens=10) for p in PROMPTS]
    batched = model.generate_batch(PROMPTS, max_new_tokens=10)
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.prompt_tokens for g in batched] == [g.prompt_tokens for g in single]


def test_concurrent_callers_are_batched_and_get_their_own_answers(model, monkeypatch):
    expected = [model.generate_full(p, max_new_tokens=6).text for p in PROMPTS]
    sizes = []
    real = type(model).decode_batch

    def spy(self, prompts, *a, **kw):  # prompts arrive tokenised: rendered once, in generate_full
        sizes.append(len(prompts))
        return real(self, prompts, *a, **kw)

    monkeypatch.setattr(type(model), "decode_batch", spy)
    monkeypatch.setattr(model, "batch_size", 8)
    got = [None] * len(PROMPTS)
    start = threading.Barrier(len(PROMPTS))

    def ask(i):
        start.wait()
        got[i] = model.generate_full(PROMPTS[i], max_new_tokens=6).text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == expected
    assert max(sizes) > 1 and sum(sizes) == len(PROMPTS)  # coalesced, nothing answered twice


def test_a_failing_batch_fails_each_caller_and_the_batcher_lives_on(model, monkeypatch):
    monkeypatch.setattr(model, "batch_size", 4)
    real, calls = type(model).decode_batch, []

    def flaky(self, prompts, *a, **kw):
        calls.append(len(prompts))
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(self, prompts, *a, **kw)

    monkeypatch.setattr(type(model), "decode_batch", flaky)
    with pytest.raises(RuntimeError, match="out of memory"):
        model.generate_full(PROMPTS[0], max_new_tokens=4)
    assert model.generate_full(PROMPTS[0], max_new_tokens=4).text  # the worker still serves


def test_sampling_bypasses_the_batcher_and_memories_decode_in_a_kv_batch(model, monkeypatch):
    from dkilab.models import encode_memory, kv_batch

    monkeypatch.setattr(model, "batch_size", 4)
    monkeypatch.setattr(type(model), "decode_batch", lambda *a, **k: pytest.fail("a K/V generation as text"))
    mem = encode_memory(model, "The user likes tea.\n")
    alone = kv_batch.decode(model, model.encode(model.render(PROMPTS[0])), [(mem, 1.0)], 6)[0]
    seen = []
    real = kv_batch.decode_many
    monkeypatch.setattr(kv_batch, "decode_many", lambda m, rows, *a, **k: seen.append(len(rows)) or real(m, rows, *a,
                                                                                                        **k))
    assert model.generate_full(PROMPTS[0], max_new_tokens=6, memories=[(mem, 1.0)]).token_ids == alone
    assert seen == [1]
    assert model.generate_full(PROMPTS[0], max_new_tokens=3, temperature=0.7, seed=1).new_tokens > 0


def test_smollm2_kv_questions_decoded_together_equal_each_alone(model):
    from dkilab.models import encode_memory
    from dkilab.models.kv import decode
    from dkilab.models.kv_batch import decode_many

    tea, cat = (encode_memory(model, t) for t in ("The user likes tea.\n", "My cat is called Pixel. 她住在里斯本。\n"))
    memories = [[(tea, 1.0)], [(cat, 1.0), (tea, 0.4)], None, [(cat, 0.0)], [(cat, 1.0)]]
    rows = [(model.encode(model.render(p)), m) for p, m in zip(PROMPTS, memories)]
    assert decode_many(model, rows, 10) == [decode(model, ids, m, 10) for ids, m in rows]


def test_a_replaced_batcher_finishes_its_queue_and_ends(model, monkeypatch):
    import time

    monkeypatch.setattr(model, "batch_size", 2)
    first = model._batcher()
    assert model.generate_full(PROMPTS[0], max_new_tokens=2).text
    monkeypatch.setattr(model, "batch_size", 3)
    second = model._batcher()
    assert second is not first and model.generate_full(PROMPTS[1], max_new_tokens=2).text
    workers = [t for t in threading.enumerate() if t.name == "dkilab-batcher"]
    deadline = time.monotonic() + 5
    while len(workers) > 1 and time.monotonic() < deadline:  # the old worker saw its sentinel
        time.sleep(0.05)
        workers = [t for t in threading.enumerate() if t.name == "dkilab-batcher" and t.is_alive()]
    assert len(workers) == 1


def test_a_cells_batch_size_is_a_view_that_leaves_the_shared_model_alone(model):
    """load_model(batch_size=8) shares the weights of the cached model but not its batch size: a later cell
    loading the same spec at batch 1 (or one running beside it) is not batched behind its back."""
    from dkilab.models import load_model

    wide = load_model(batch_size=8)
    assert wide.batch_size == 8 and wide.model is model.model and wide.tokenizer is model.tokenizer
    assert load_model(batch_size=1) is model and model.batch_size == 1 and wide.batch_size == 8
    assert load_model(batch_size=8) is wide  # one view per batch size: its K/V caches last across cells
    assert wide.generate_full(PROMPTS[0], max_new_tokens=6).text == model.generate_full(PROMPTS[0],
                                                                                        max_new_tokens=6).text
