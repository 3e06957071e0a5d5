"""Language models: the offline SmolLM2 (or any transformers model), an OpenAI-compatible client,
and K/V memory injection (`dkilab.models.kv`). Importing this package does not import torch."""
from importlib import import_module

_EXPORTS = {
    "load_model": "dkilab.models.loading",
    "load_tokenizer_model": "dkilab.models.loading",
    "DEFAULT_MODEL": "dkilab.models.loading",
    "ModelNotAvailableError": "dkilab.models.loading",
    "ChatModel": "dkilab.types",
    "TransformersChatModel": "dkilab.models.chat",
    "Generation": "dkilab.types",
    "OpenAIChatModel": "dkilab.models.backends.openai_client",
    "MemoryKV": "dkilab.models.kv",
    "encode_memory": "dkilab.models.kv",
    "next_token_logits": "dkilab.models.kv",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dkilab.models' has no attribute {name!r}")
