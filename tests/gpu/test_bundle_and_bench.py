"""The bare-node smoke bundle and `dkilab bench gpu`, on the CPU: the same code that ran on the H200
(docs/gpu/), with tiny shapes."""
import json
import subprocess
import sys

from dkilab.cli import main

from tests.conftest import ROOT


def test_the_smoke_bundle_passes_on_cpu_with_figures_per_architecture(tmp_path):
    from dkilab.gpu.bundle import main as bundle
    from dkilab.models.tiny import ARCHITECTURES

    assert bundle(["--out", str(tmp_path), "--cpu"]) == 0
    report = json.loads((tmp_path / "smoke.json").read_text())
    kv = [r for r in report["rows"] if r["check"] == "kv"]
    assert [r["arch"] for r in kv] == list(ARCHITECTURES) and all(r["max_dlogit"] < 1e-4 for r in kv)
    assert all(r["kl_one_vs_zero"] > 10 * max(r["kl_tiny_vs_zero"], 1e-7) for r in kv)
    assert {r["check"] for r in report["rows"]} == {"kv", "batched", "kv_batched", "judge", "attention"}
    assert all(r["identical"] == r["prompts"] == 4 for r in report["rows"] if r["check"] == "kv_batched")
    assert "| llama | float32 |" in (tmp_path / "smoke.md").read_text()


def test_the_bundle_imports_nothing_beyond_torch_transformers_and_tokenizers():
    code = ("import sys, dkilab.gpu.bundle as b, dkilab.bench.gpu, dkilab.models.chat, dkilab.models.kv, "
            "dkilab.models.tiny, dkilab.gpu.smoke, dkilab.models.kv_batch, dkilab.gpu.wheelhouse\n"
            "heavy = {'mlflow', 'faiss', 'jieba', 'pandas', 'sklearn', 'gguf', 'sentence_transformers', "
            "'onnxruntime'}\nprint(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_bench_gpu_prints_its_tables_on_cpu(tmp_path, capsys):
    assert main(["bench", "gpu", "--cpu", "--repeats", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "### tiny-llama" in out and "### tiny-qwen2" in out and "| turn |" in out
    assert "| full_attention / full_history |" in out
    result = json.loads((tmp_path / "bench_gpu.json").read_text())
    entry = result["models"]["tiny-llama"]
    assert [r["batch"] for r in entry["throughput"]] == [1, 8, 32] and len(entry["session"]) == 5
    q = entry["one_question"][0]
    assert q["block_bytes"] == q["bytes_per_memory_token"] * (q["memory_tokens"] + 1) > 0
    assert q["kv_encoded_over_text"] > q["kv_over_text"] > 0
    assert [r["batch"] for r in entry["per_question"]] == [1, 8] and all(r["kv_over_text"] > 0
                                                                          for r in entry["per_question"])
