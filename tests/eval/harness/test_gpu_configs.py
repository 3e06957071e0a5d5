"""The ready-made GPU configs load and validate here (no download, no GPU): every key is known, the
sweeps expand to the cells their comments promise, and the model block asks for what a GPU run needs."""
from pathlib import Path

import pytest
from dkilab.eval.harness.experiment import check_config, load_experiment

from tests.conftest import ROOT

GPU = sorted((ROOT / "experiments" / "gpu").glob("*.yaml"))
CELLS = {"locomo_strategies": 7, "sweep_threshold_budget": 9, "kv_alpha": 15, "claim_fact_calls": 2,
         "claim_flat_vs_summary": 2, "claim_summaries": 2, "served_vllm": 4,
         "recall_agent_policies": 6, "recall_v4_seed": 3, "longmemeval_s": 7, "peer_mem0": 6,
         "long_messages": 12, "long_messages_longmemeval": 7}


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.stem)
def test_gpu_config_validates(path: Path, monkeypatch):
    # a LongMemEval judge reads LongMemEval's evaluation script under the data dir
    if path.stem in ("longmemeval_s", "long_messages_longmemeval"):
        monkeypatch.setenv("DKILAB_DATA_DIR", str(ROOT / "tests" / "data"))  # the stand-in written for the tests
    cfg = load_experiment(path)
    cells = check_config(cfg, str(path))
    assert len(cells) == CELLS[path.stem]
    m = cfg.model
    text = path.read_text()
    assert ("# Run:" in text or "# 2. Run:" in text) and "GPU time" in text  # the command and the estimate
    if m.spec.startswith("openai:"):  # served: text strategies only, budgets in the served model's tokens
        assert m.tokenizer == m.spec.split(":", 1)[1].split("@")[0] and "--tool-call-parser" in text
        assert not any(c.instance.needs_kv(c.dataset.has_preferences) for c in cells)
        return
    # a hub id, bf16, placed by accelerate
    assert m.device == "auto" and m.dtype in ("bf16", "bfloat16") and "/" in m.spec


def test_every_gpu_config_is_listed():
    assert {p.stem for p in GPU} == set(CELLS)
