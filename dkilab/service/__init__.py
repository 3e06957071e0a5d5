"""The recall service: the user-bound query tools and session history over HTTP (`dkilab serve`), its
API keys, and `Client`, the same memory interface as the in-process view. Importing this package does
not import FastAPI."""
from importlib import import_module

_EXPORTS = {
    "Client": "dkilab.service.client",
    "ServiceError": "dkilab.service.client",
    "create_app": "dkilab.service.app",
    "serve": "dkilab.service.server",
    "add_key": "dkilab.service.keys",
    "read_keys": "dkilab.service.keys",
    "KeyRing": "dkilab.service.keys",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dkilab.service' has no attribute {name!r}")
