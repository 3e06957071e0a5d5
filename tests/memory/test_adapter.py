"""offline:minilm-locomo: MiniLM with a low-rank adapter merged in, keyed by the adapter's files."""
from pathlib import Path

import numpy as np
import pytest

TEXTS = ["When did Caroline go to the support group?", "I went to a support group yesterday, it was powerful."]


@pytest.fixture
def tiny_adapter(tmp_path, monkeypatch):
    """A rank-2 adapter with random (non-zero) weights in place of the shipped one; the cache in tmp_path."""
    import torch
    from dkilab.encoders import adapter
    from dkilab.encoders.embedder import resolve_model_path
    from peft import get_peft_model
    from transformers import AutoModel

    torch.manual_seed(0)
    cfg = adapter.lora_config(2)
    cfg.init_lora_weights = False  # peft starts B at zero (a no-op adapter); random, so the merge shows
    peft_model = get_peft_model(AutoModel.from_pretrained(resolve_model_path("offline:minilm")), cfg)
    out = tmp_path / "adapters" / "minilm-locomo"
    peft_model.save_pretrained(str(out))
    monkeypatch.setattr(adapter, "ADAPTER_DIR", out)
    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    return out, peft_model.eval()


def test_the_adapter_is_merged_into_minilm_and_keys_its_stores_and_cells(tiny_adapter, tmp_path):
    import torch
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, index_text_for, resolve_model_path, weights_digest
    from dkilab.eval.harness.experiment import EmbedderSpec
    from dkilab.eval.harness.stores import store_path
    from dkilab.memory import Embedder
    from dkilab.recall.learned import family
    from dkilab.types import Conversation
    from sentence_transformers import SentenceTransformer

    path, peft_model = tiny_adapter
    merged = resolve_model_path(LOCOMO_EMBEDDER)
    assert resolve_model_path(LOCOMO_EMBEDDER) == merged  # built once, reused
    st = SentenceTransformer(merged, device="cpu")
    stock = SentenceTransformer(resolve_model_path("offline:minilm"), device="cpu")
    got = st.encode(TEXTS, normalize_embeddings=True)
    assert float(np.min(np.sum(got * stock.encode(TEXTS, normalize_embeddings=True), 1))) < 0.99  # it moved
    # the merged weights compute what the adapter does on top of MiniLM (mean pooling, unit rows)
    enc = st.tokenize(TEXTS)
    with torch.no_grad():
        hidden = peft_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    mask = enc["attention_mask"][..., None].float()
    ref = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-5)

    # a MiniLM build (each turn with the one it replies to, as every store), with fusion parts of its own (its
    # cosines sit at other levels)
    assert family(LOCOMO_EMBEDDER) == "minilm-locomo" and index_text_for(LOCOMO_EMBEDDER) == "2"
    old = weights_digest(LOCOMO_EMBEDDER)
    assert old == weights_digest(str(path)) and Embedder(LOCOMO_EMBEDDER).weights == old
    cell = EmbedderSpec(english=LOCOMO_EMBEDDER).for_language("en").identity()
    assert cell["model"] == LOCOMO_EMBEDDER and cell["weights"] == old
    conv = [Conversation("c", "alice", [])]
    where = store_path(conv, "locomo", Embedder(LOCOMO_EMBEDDER))

    # the adapter fitted again: another merge, another cached store, another cell
    (path / "adapter_config.json").write_text((path / "adapter_config.json").read_text() + "\n")
    assert weights_digest(LOCOMO_EMBEDDER) != old
    assert resolve_model_path(LOCOMO_EMBEDDER) != merged
    assert store_path(conv, "locomo", Embedder(LOCOMO_EMBEDDER)) != where
    assert EmbedderSpec(english=LOCOMO_EMBEDDER).for_language("en").identity() != cell


def test_two_builders_at_once_get_one_merge_and_leave_nothing_behind(tiny_adapter, tmp_path, monkeypatch):
    """Builders in two threads: one merge, built by one of them while the other waits (transformers' loading
    is not thread-safe: two loads at once left torch.nn.init's functions patched to no-ops, so the next model
    in the process was built uninitialised and failed to save, "Cannot copy out of meta tensor")."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from dkilab.encoders import adapter
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, resolve_model_path

    real, active, seen, lock = adapter._build, [0], [], threading.Lock()

    def build(*args):
        with lock:
            active[0] += 1
            seen.append(active[0])
        time.sleep(0.3)  # long enough for the other thread to arrive
        try:
            real(*args)
        finally:
            with lock:
                active[0] -= 1
    monkeypatch.setattr(adapter, "_build", build)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: resolve_model_path(LOCOMO_EMBEDDER), range(2)))
    assert got[0] == got[1] and seen == [1]  # built once, never two at a time
    assert [p.name for p in (tmp_path / "cache" / "encoders").iterdir()] == [got[0].rsplit("/", 1)[1]]
    merged = Path(got[0])
    assert (merged / adapter.FITTED_ON_FILE).exists()  # written inside the build, before the rename
    before = sorted(p.name for p in merged.iterdir())
    (merged / adapter.FITTED_ON_FILE).unlink()  # a directory merged before the record existed: 8 writers at once
    with ThreadPoolExecutor(8) as pool:
        again = list(pool.map(lambda _: resolve_model_path(LOCOMO_EMBEDDER), range(8)))
    assert set(again) == {got[0]} and sorted(p.name for p in merged.iterdir()) == before


def test_english_picks_the_encoder_auto_gives_english_data_only():
    from dkilab.eval.harness.experiment import EmbedderSpec

    spec = EmbedderSpec(english="offline:minilm-locomo")
    assert spec.for_language("en").model == "offline:minilm-locomo"
    assert spec.for_language("zh").model == "offline:e5"  # other languages keep theirs
    assert EmbedderSpec().identity() == {"model": "auto", "batch_size": 64}  # unset: the cell hashes of before
    assert EmbedderSpec().for_language("en").model == "offline:minilm-locomo"  # the default for English
    assert EmbedderSpec(english="offline:minilm").for_language("en").model == "offline:minilm"  # the stock ablation
    assert spec.identity()["english"] == "offline:minilm-locomo"
    with pytest.raises(ValueError, match="embedder.english .* ignored"):
        EmbedderSpec(model="offline:e5", english="offline:minilm-locomo")


def test_a_missing_or_broken_adapter_is_named_and_nothing_is_cached(tiny_adapter, tmp_path, monkeypatch):
    from dkilab.encoders import adapter
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, resolve_model_path

    path, _ = tiny_adapter
    weights = path / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated
    with pytest.raises(ValueError, match=f"adapter in {path} cannot be loaded"):
        resolve_model_path(LOCOMO_EMBEDDER)
    assert not list((tmp_path / "cache").rglob("modules.json"))  # no half-built merge left to be reused
    monkeypatch.setattr(adapter, "ADAPTER_DIR", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere/adapter_config.json"):
        resolve_model_path(LOCOMO_EMBEDDER)


def test_the_shipped_adapter_is_fp16_under_the_file_limit_and_names_its_provenance():
    from dkilab.encoders.adapter import ADAPTER_DIR
    from safetensors import safe_open

    weights = ADAPTER_DIR / "adapter_model.safetensors"
    assert weights.stat().st_size < 1_000_000
    with safe_open(str(weights), "pt") as f:
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}
        assert len(list(f.keys())) == 6 * 6 * 2  # A and B of the six linear layers of the six blocks
    assert dtypes == {"torch.float16"}
    card = (ADAPTER_DIR / "README.md").read_text()
    assert "conversations 5-9 were never read" in card and "CC BY-NC 4.0" in card


@pytest.mark.slow
def test_the_shipped_adapter_runs_as_onnx_with_the_merged_weights_vectors():
    """The ONNX build of the merged weights gives the PyTorch merge's vectors (so its ranking is the same)."""
    from dkilab.encoders.adapter import ADAPTER_DIR
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, resolve_model_path
    from dkilab.memory import Embedder
    from sentence_transformers import SentenceTransformer

    assert (ADAPTER_DIR / "adapter_model.safetensors").exists()
    ref = SentenceTransformer(resolve_model_path(LOCOMO_EMBEDDER), device="cpu").encode(TEXTS,
                                                                                        normalize_embeddings=True)
    got = Embedder("offline:minilm-locomo").encode(TEXTS)
    assert float(np.min(np.sum(got * ref, 1))) > 0.99999
