"""Everything a GPU run needs, checked before a model loads: the device, the weights of every model
(a local path, `$DKILAB_MODEL_ROOT/<hub id>`, the Hugging Face cache, or the hub with `HF_TOKEN`; a
served model's endpoint), and the questions of every dataset. Each problem is one line naming the
config, the key and the fix; all of them are reported at once."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dkilab.config import ConfigError
from dkilab.eval.data.selection import select_questions
from dkilab.eval.harness.experiment import check_config, load_experiment, with_question_limit
from dkilab.models.backends.openai_client import served_models
from dkilab.models.oracle import SPEC as ORACLE
from dkilab.models.specs import ModelNotAvailableError, model_root_path, offline_gguf


def cuda_missing() -> str | None:
    """None when torch sees a CUDA device, else the one line that says why not."""
    import torch

    if torch.cuda.is_available():
        return None
    build = torch.version.cuda
    why = (f"torch {torch.__version__} is a CPU build (`make gpu` installs the CUDA one)" if build is None
           else f"torch {torch.__version__} (CUDA {build}) sees no device (driver? CUDA_VISIBLE_DEVICES?)")
    return f"dkilab gpu: no CUDA device here: {why}; run the smoke stage on CPU with --cpu"


def check_weights(spec: str) -> str | None:
    """None when `spec`'s weights can be loaded without surprises, else what is missing and the fix."""
    scheme = spec.split(":", 1)[0] if ":" in spec else ""
    if scheme == "offline":
        try:
            offline_gguf(spec)
            return None
        except ModelNotAvailableError as e:
            return str(e)
    if scheme == "scripted":
        return None if spec == ORACLE or Path(spec[len("scripted:"):]).exists() else \
            f"{spec}: no such answers file"
    if scheme == "openai":
        return check_endpoint(spec)
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        return None if path.exists() else f"{spec}: no such GGUF file"
    if path.is_absolute() or spec.startswith((".", "~")) or path.exists():
        return None if (path / "config.json").exists() else f"{spec}: no config.json in that directory"
    if model_root_path(spec) is not None:
        return None
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(spec, "config.json"), str):
        return None  # downloaded before (the cache also holds the weights a finished download wrote)
    root = os.environ.get("DKILAB_MODEL_ROOT")
    where = f"not under $DKILAB_MODEL_ROOT ({root})" if root else "$DKILAB_MODEL_ROOT is not set"
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "false", "no", ""):
        return (f"{spec}: not in the Hugging Face cache, {where}, and HF_HUB_OFFLINE=1 forbids downloading it "
                f"(put it at $DKILAB_MODEL_ROOT/{spec}, or allow the download: HF_HUB_OFFLINE=0, HF_TOKEN for a gated "
                "model)")
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    token = os.environ.get("HF_TOKEN")
    try:
        info = model_info(spec, token=token, timeout=10)
    except GatedRepoError:
        return f"{spec} is gated on the hub: accept its licence on its page, then set HF_TOKEN"
    except RepositoryNotFoundError:
        return f"{spec}: no such model on the hub (a private one needs HF_TOKEN)"
    except Exception as e:  # noqa: BLE001 - offline, proxy, DNS: say so in one line
        return f"{spec}: cannot reach the hub ({type(e).__name__}) and {where}"
    if getattr(info, "gated", False) and not token:
        return f"{spec} is gated on the hub: accept its licence on its page, then set HF_TOKEN"
    return None


def check_endpoint(spec: str, timeout: float = 5.0) -> str | None:
    """A served model (`openai:<model>@<base_url>`): the server answers `/models` and lists the model."""
    name, _, base = spec[len("openai:"):].partition("@")
    try:
        listed = [m.get("id") for m in served_models(base, timeout)]
    except Exception as e:  # noqa: BLE001
        return (f"{spec}: {base} does not answer GET /models ({type(e).__name__}: {e}); start the server first "
                "(README-GPU)")
    return None if name in listed else f"{spec}: {base} serves {listed}, not {name!r}"


@dataclass
class Checked:
    """The configs as loaded, the questions per cell, and every problem found."""
    configs: list = field(default_factory=list)  # (path, ExperimentConfig, [Cell])
    questions: dict = field(default_factory=dict)  # (config path, cell config hash) -> questions
    problems: list[str] = field(default_factory=list)


def preflight(paths: list[str], data_dir=None, overrides: dict | None = None, limit: int | None = None) -> Checked:
    """Load and validate every config, check every model's weights and every dataset (questions counted,
    nothing embedded, no model loaded)."""
    out = Checked()
    specs: dict[str, list[str]] = {}
    counts: dict[str, int | str] = {}
    for path in paths:
        try:
            cfg = load_experiment(path, overrides)
            if limit is not None:
                cfg = with_question_limit(cfg, limit)
            cells = check_config(cfg, str(path))
        except (ConfigError, OSError) as e:
            out.problems.append(str(e))
            continue
        out.configs.append((path, cfg, cells))
        for cell in cells:
            if cell.needs_model:
                specs.setdefault(cell.model.spec, []).append(f"{path}: model.spec")
            if cell.judge is not None:
                specs.setdefault(cell.judge.model, []).append(f"{path}: judge.model")
            key = cell.dataset.model_dump_json()
            if key not in counts:
                try:
                    counts[key] = len(select_questions(cell.dataset, data_dir)[1])
                except Exception as e:  # noqa: BLE001 - a missing or broken dataset: one line, the run stops here
                    counts[key] = failed = f"{path}: dataset {cell.dataset.name}: {e}"
                    out.problems.append(failed)
            if isinstance(counts[key], int):
                out.questions[(path, cell.config_hash)] = counts[key]
    for spec, where in specs.items():
        problem = check_weights(spec)
        if problem:
            out.problems.append(f"{where[0]}: {problem}")
    return out
