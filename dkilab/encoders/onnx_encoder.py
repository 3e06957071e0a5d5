"""all-MiniLM-L6-v2's own weights exported to ONNX once and run by onnxruntime, with mean pooling and L2
normalisation as the sentence-transformers model does:
- fp32 (`offline:minilm`, the default): the same numbers as the PyTorch model (cosine >= 0.9999998 to its
  vectors), about 2x its messages/s and a third of its query time on this 2-core machine (`dkilab bench
  embedders`), so the ranking is unchanged by construction;
- int8 (`offline:minilm-int8`): dynamically quantised by onnxruntime's `quantize_dynamic`; faster still,
  but its vectors move (cosine ~0.95 to fp32) and its ranking is measured by `experiments/embedders_int8.yaml`.
The build goes to `$DKILAB_CACHE_DIR/encoders/` (atomic; a second process reuses it)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np

from dkilab.cache import cache_dir
from dkilab.weights import quiet_loading

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def build(model_dir: str, int8: bool = True) -> Path:
    """The ONNX build (int8, or fp32) of the sentence-transformers model in `model_dir` (made on first use)."""
    src = Path(model_dir)
    key = hashlib.sha1(f"{src.resolve()}:{(src / 'config.json').stat().st_mtime_ns}".encode()).hexdigest()[:10]
    kind = "int8" if int8 else "fp32"
    target = cache_dir() / "encoders" / f"{src.name}-{kind}-{key}"
    if (target / f"model_{kind}.onnx").exists():
        return target
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)

    with quiet_loading():
        tok, model = AutoTokenizer.from_pretrained(src), AutoModel.from_pretrained(src).eval()

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    enc = tok(["export"], return_tensors="pt")
    with warnings.catch_warnings():  # the tracer's notes on shape-derived constants (true for an encoder) are noise
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(model), tuple(enc[k] for k in INPUTS), str(tmp / "model.onnx"),
                          input_names=list(INPUTS), output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={k: {0: "batch", 1: "tokens"} for k in (*INPUTS, "last_hidden_state")})
    if int8:
        quantize_dynamic(str(tmp / "model.onnx"), str(tmp / "model_int8.onnx"), weight_type=QuantType.QInt8)
        (tmp / "model.onnx").unlink()
    else:
        (tmp / "model.onnx").rename(tmp / "model_fp32.onnx")
    tok.save_pretrained(tmp)
    cfg = src / "sentence_bert_config.json"
    max_len = json.loads(cfg.read_text()).get("max_seq_length", 256) if cfg.exists() else 256
    (tmp / "dkilab.json").write_text(json.dumps({"source": str(src), "max_seq_length": max_len}))
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


_SHARED: dict[tuple[str, bool, str], "OnnxEncoder"] = {}
_SHARED_LOCK = threading.Lock()


def shared(model_dir: str, int8: bool) -> "OnnxEncoder":
    """One encoder per build and cache directory in a process: every Embedder of the same weights shares its
    onnxruntime session (safe across threads; loading one costs ~0.3 s and ~90 MB)."""
    key = (str(Path(model_dir).resolve()), int8, str(cache_dir()))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = OnnxEncoder(model_dir, int8)
        return _SHARED[key]


class OnnxEncoder:
    """An ONNX build (int8 or fp32) behind the calls `Embedder` needs (`embedder.OwnEncoder`: mean pooling, unit
    rows)."""
    batch_size: int | None = 16  # sorted by length, 16 texts a batch ran fastest here (`dkilab bench embedders`)

    def __init__(self, model_dir: str, int8: bool = True):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        path = build(model_dir, int8)
        self._tokenizer_lock = threading.Lock()
        self.max_length = json.loads((path / "dkilab.json").read_text())["max_seq_length"]
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        # no spinning between runs: idle spinning threads took the cores from FAISS and SQLite right after a
        # query encoding (a 0.02 ms vector search took ~4 ms); batch throughput is the same without it
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
        self.session = ort.InferenceSession(str(path / f"model_{'int8' if int8 else 'fp32'}.onnx"), opts,
                                            providers=["CPUExecutionProvider"])
        self._dim = int(self.encode(["dimension"])[0].shape[0])

    def get_embedding_dimension(self) -> int:
        return self._dim

    def token_counts(self, texts: list[str]) -> list[int]:
        with self._tokenizer_lock:
            ids = self.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return [len(i) for i in ids]

    def encode(self, texts, *, is_query: bool = False, batch_size: int | None = None) -> np.ndarray:
        """Texts sorted by length so a batch pads little; rows back in the given order."""
        texts = list(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        size = batch_size or self.batch_size or 16
        parts = []
        for i in range(0, len(texts), size):
            with self._tokenizer_lock:  # a fast tokenizer used by two threads at once fails ("Already borrowed")
                enc = self.tokenizer([texts[j] for j in order[i:i + size]], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="np")
            hidden = self.session.run(None, {k: enc[k].astype(np.int64) for k in INPUTS})[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            vecs = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            parts.append(vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12))
        if not parts:
            return np.zeros((0, self._dim), np.float32)
        rows = np.concatenate(parts).astype(np.float32, copy=False)
        out = np.empty_like(rows)
        out[order] = rows  # the i-th sorted row belongs to text order[i]
        return out
