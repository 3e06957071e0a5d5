"""`offline:minilm-locomo`: all-MiniLM-L6-v2 with a low-rank adapter (LoRA, peft) fine-tuned on LoCoMo dev's
(question, evidence turn) pairs, merged into the weights once and cached as a sentence-transformers directory
(then exported to ONNX as `offline:minilm` is): the encoder `auto` gives English data. The adapter ships in
`adapters/minilm-locomo/` (rank 8, fp16, 0.66 MB), written by `python experiments/bench/finetune_encoder_dev.py
--lora 8 --lr 2e-4 --write`, which never reads LoCoMo test. The merged directory, the encoder's stores and its
cells are keyed by the adapter's digest (`embedder.weights_digest`), so an adapter fitted again never reuses any
of them."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from dkilab.cache import cache_dir
from dkilab.weights import quiet_loading

ADAPTER_DIR = Path(__file__).with_name("adapters") / "minilm-locomo"
# left in every directory the adapter is merged into: a copy named as an encoder is known to be fitted on
# LoCoMo dev (dkilab/eval/harness/fitted.py), whatever its path
FITTED_ON_FILE = "dkilab_fitted_on.json"
# every linear layer of the transformer's blocks (attention q/k/v/output, feed-forward), not the unused pooler
TARGET_MODULES = r".*encoder\.layer\.\d+\..*(query|key|value|dense)$"
_BUILD_LOCK = threading.Lock()  # one merge at a time in a process; processes race on the atomic rename


def lora_config(rank: int):
    """The adapter's shape: rank `rank`, alpha 2 x rank, no dropout, on `TARGET_MODULES`."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=TARGET_MODULES)


def merged_model_dir(base: str, adapter: Path, digest: str | None) -> str:
    """A sentence-transformers directory of the MiniLM in `base` with `adapter` merged into its weights, keyed
    by `digest` (the adapter's files, `embedder.weights_digest`; `embedder.resolve_model_path` passes all
    three for `offline:minilm-locomo`). Built on first use under `$DKILAB_CACHE_DIR/encoders/`, atomically: a
    second builder, thread or process, reuses it or loses the race harmlessly; a builder killed midway leaves
    only its own temporary directory."""
    if not (adapter / "adapter_config.json").exists():
        raise FileNotFoundError(f"the MiniLM adapter is missing: {adapter}/adapter_config.json")
    target = cache_dir() / "encoders" / f"all-MiniLM-L6-v2+{adapter.name}-{digest}"
    if not (target / "modules.json").exists():
        with _BUILD_LOCK:  # transformers' loading is not thread-safe (two at once left torch on the meta device)
            if not (target / "modules.json").exists():
                _build(base, adapter, target, digest)
    record = target / FITTED_ON_FILE
    if not record.exists():  # directories merged before the record existed get it too
        fd, tmp = tempfile.mkstemp(prefix=record.name, suffix=".tmp", dir=target)  # one per writer (thread, process)
        with os.fdopen(fd, "w") as out:
            out.write(_fitted_on(adapter, digest))
        os.replace(tmp, record)
    return str(target)


def _fitted_on(adapter: Path, digest: str | None) -> str:
    return json.dumps({"adapter": adapter.name, "digest": digest, "fitted_on": "locomo dev (0-4)"})


def _build(base_dir: str, adapter: Path, target: Path, digest: str | None) -> None:
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer


    with quiet_loading():
        model = SentenceTransformer(base_dir, device="cpu")
        base: Any = model[0].auto_model
        try:  # peft injects the adapter into `base` and merges it there, in place
            PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
        except Exception as exc:  # a truncated or foreign adapter file: name it (nothing has been written)
            raise ValueError(f"the MiniLM adapter in {adapter} cannot be loaded: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))  # one per builder (thread, process)
    model.save(str(tmp))
    (tmp / FITTED_ON_FILE).write_text(_fitted_on(adapter, digest))
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
