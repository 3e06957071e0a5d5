"""The tiny random-weight architectures live in the library (`dkilab.models.tiny`: the GPU smoke stage uses
them too); re-exported here for the tests."""
from dkilab.models.tiny import ARCHITECTURES, COMMON, SPECIAL, WORDS, tiny_model, tiny_tokenizer  # noqa: F401
