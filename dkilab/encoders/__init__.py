"""Sentence encoders: what turns a message or a question into a vector. The offline MiniLM and e5 builds, the
LoCoMo-dev low-rank adapter merged into MiniLM (`adapter.py`, its weights in `adapters/`), the ONNX export they run
as (`onnx_encoder.py`), the language that picks one (`auto`), and the digest of local weights that keys stores and
cells. The memory layer stores what they encode."""
from dkilab.encoders.embedder import Embedder

__all__ = ["Embedder"]
