"""The local backend: `offline:<name>` (a bundled GGUF) and `transformers:<hub id or path>` (`loading.load_local`)."""
from __future__ import annotations

from dkilab.models.loading import load_local
from dkilab.models.specs import MODELS

MODELS.add("offline", load_local)
MODELS.add("transformers", load_local)
