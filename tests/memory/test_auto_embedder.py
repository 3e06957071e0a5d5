"""A new store opened without an embedder gets what experiments' `embedder: auto` gives its data (issue 59):
the library API and `dkilab run` recall through the same encoder."""
from __future__ import annotations

from datetime import datetime, timezone

from dkilab.encoders.embedder import DEFAULT_EMBEDDER, E5_EMBEDDER, LOCOMO_EMBEDDER, Embedder, language_of
from dkilab.eval.harness.experiment import EmbedderSpec
from dkilab.memory.store import MemoryStore
from dkilab.types import Message

T = datetime(2024, 5, 1, tzinfo=timezone.utc)


def _msgs(texts: list[str], user: str = "u") -> list[Message]:
    return [Message(message_id=f"m{i}", user_id=user, session_id="s", turn_id=i, role="user", content=t, timestamp=T)
            for i, t in enumerate(texts)]


def test_english_data_gets_the_english_default_and_keeps_it(tmp_path):
    with MemoryStore.open(tmp_path / "s") as store:
        assert store.embedder.model_name == DEFAULT_EMBEDDER  # nothing embedded yet
        store.add_messages(_msgs(["I adopted a puppy named Biscuit last week.", "We hiked the ridge trail."]))
        assert store.embedder.model_name == LOCOMO_EMBEDDER == EmbedderSpec().for_language("en").model
        hits = store.for_user("u").semantic_search(query_text="What is the dog called?", top_k=1).items
        assert hits[0].message.message_id == "m0"
    with MemoryStore.open(tmp_path / "s") as again:  # reopened: the encoder that built it, not a new choice
        again.add_messages(_msgs(["我们去了杭州。"], user="v"))
        assert again.embedder.model_name == LOCOMO_EMBEDDER


def test_chinese_and_mixed_data_get_e5_as_experiments_do(tmp_path):
    assert language_of(["我上周领养了一只小狗。", "It is called Biscuit."]) == "mixed"
    assert language_of(["Hello there.", "How are you?"]) == "en" and language_of([]) == "mixed"
    with MemoryStore.open(tmp_path / "zh") as store:
        store.add_messages(_msgs(["我上周领养了一只小狗，叫饼干。", "我们周末去爬山了。"]))
        assert store.embedder.model_name == E5_EMBEDDER == EmbedderSpec().for_language("mixed").model


def test_an_embedder_given_or_vectors_given_are_never_replaced(tmp_path):
    import numpy as np

    with MemoryStore.open(tmp_path / "given", embedder=Embedder(DEFAULT_EMBEDDER)) as store:
        store.add_messages(_msgs(["I adopted a puppy."]))
        assert store.embedder.model_name == DEFAULT_EMBEDDER
    vec = np.zeros((1, 384), dtype=np.float32)
    vec[0, 0] = 1.0
    with MemoryStore.open(tmp_path / "vectors") as store:  # vectors given: the encoder that answers queries stays
        store.add_messages(_msgs(["I adopted a puppy."]), embeddings=vec)
        assert store.embedder.model_name == DEFAULT_EMBEDDER
