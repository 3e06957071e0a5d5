"""dkilab: a research workbench and evaluation harness for conversational memory.

`import dkilab` stays light: heavy dependencies (torch, transformers, faiss,
sentence-transformers, mlflow) are imported lazily by the modules that need them.
"""
import os
from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# an offline research tool (air-gapped GPU nodes): no usage events leave the machine unless asked for
# (MLFLOW_DISABLE_TELEMETRY=false / HF_HUB_DISABLE_TELEMETRY=0 in the environment turn them back on)
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# public name -> module that defines it; resolved on first attribute access
_EXPORTS = {
    "Message": "dkilab.types",
    "Hit": "dkilab.types",
    "Page": "dkilab.types",
    "MemoryStore": "dkilab.memory",
    "UserMemory": "dkilab.memory",
    "Embedder": "dkilab.memory",
    "MessageNotFoundError": "dkilab.memory",
    "MemoryManager": "dkilab.memory",
    "SessionManager": "dkilab.memory",
    "SessionRecord": "dkilab.memory",
    "L1Memory": "dkilab.memory",
    "L2Memory": "dkilab.memory",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dkilab' has no attribute {name!r}")
