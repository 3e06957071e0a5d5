"""`offline:minilm-locomo`: all-MiniLM-L6-v2 with a low-rank adapter (LoRA, peft) fine-tuned on LoCoMo dev's
(question, evidence turn) pairs, merged into the weights once and cached as a sentence-transformers directory
(then exported to ONNX as `offline:minilm` is). The adapter ships in `adapters/minilm-locomo/` (well under
3% of MiniLM's bytes); it was fitted by `python experiments/bench/finetune_encoder_dev.py --lora 16 --lr 2e-4
--write`, which never reads LoCoMo test. The merged directory, the encoder's stores and its cells are keyed
by the adapter's digest (`embedder.weights_digest`), so an adapter fitted again never reuses any of them."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

ADAPTER_DIR = Path(__file__).with_name("adapters") / "minilm-locomo"
# every linear layer of the transformer's blocks (attention q/k/v/output, feed-forward), not the unused pooler
TARGET_MODULES = r".*encoder\.layer\.\d+\..*(query|key|value|dense)$"


def lora_config(rank: int):
    """The adapter's shape: rank `rank`, alpha 2 x rank, no dropout, on `TARGET_MODULES`."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=TARGET_MODULES)


def merged_model_dir(adapter: Path | None = None) -> str:
    """A sentence-transformers directory of MiniLM with `adapter` (default: the shipped one) merged into its
    weights (built on first use under `$DKILAB_CACHE_DIR/encoders/`, atomically: a second builder, thread or
    process, reuses it or loses the race harmlessly; a builder killed midway leaves only its own temporary
    directory)."""
    from dkilab.cache import cache_dir
    from dkilab.memory.embedder import DEFAULT_EMBEDDER, resolve_model_path, weights_digest

    adapter = ADAPTER_DIR if adapter is None else adapter
    if not (adapter / "adapter_config.json").exists():
        raise FileNotFoundError(f"the MiniLM adapter is missing: {adapter}/adapter_config.json")
    target = cache_dir() / "encoders" / f"all-MiniLM-L6-v2+{adapter.name}-{weights_digest(str(adapter))}"
    if (target / "modules.json").exists():
        return str(target)
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer

    from dkilab.models.loading import quiet_loading

    with quiet_loading():
        model = SentenceTransformer(resolve_model_path(DEFAULT_EMBEDDER), device="cpu")
        base: Any = model[0].auto_model
        try:  # peft injects the adapter into `base` and merges it there, in place
            PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
        except Exception as exc:  # a truncated or foreign adapter file: name it (nothing has been written)
            raise ValueError(f"the MiniLM adapter in {adapter} cannot be loaded: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))  # one per builder (thread, process)
    model.save(str(tmp))
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
