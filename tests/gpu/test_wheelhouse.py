"""`make wheelhouse` on a bare node, proven on the CPU: a clean virtualenv holding only torch, transformers and
accelerate (with their own dependencies) fails the smoke-only path without the wheelhouse, and with it, installed
and run with no network at all (`unshare -rn`), passes every check."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# run in the project's venv: each distribution in the closure of torch, transformers and accelerate -> the
# top-level entries of site-packages it installed (its packages and its .dist-info)
CLOSURE = r"""
import importlib.metadata as md, json
from packaging.requirements import Requirement
seen, todo = {}, ["torch", "transformers", "accelerate"]
while todo:
    try:
        d = md.distribution(todo.pop())
    except md.PackageNotFoundError:
        continue
    name = d.metadata["Name"].lower().replace("_", "-")
    if name in seen:
        continue
    seen[name] = sorted({str(f).split("/")[0] for f in d.files or [] if not str(f).startswith("..")})
    todo += [r.name for r in map(Requirement, d.requires or []) if r.marker is None or r.marker.evaluate({"extra": ""})]
print(json.dumps(seen))
"""


def _no_network() -> list[str]:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rn", "true"]).returncode != 0:
        pytest.skip("needs `unshare -rn` (a user namespace without network) to prove the run is offline")
    return ["unshare", "-rn"]


def _clean_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    site = next(where.glob("lib/python*/site-packages"))
    ours = next(Path(sys.prefix).glob("lib/python*/site-packages"))
    closure = json.loads(subprocess.run([sys.executable, "-c", CLOSURE], capture_output=True, text=True,
                                        check=True).stdout)
    for tops in closure.values():
        for top in tops:
            if (ours / top).exists() and not (site / top).exists():
                (site / top).symlink_to(ours / top)
    return where / "bin" / "python"


def test_the_wheelhouse_runs_the_smoke_only_path_in_a_clean_venv_without_network(tmp_path):
    offline = _no_network()
    wheels = tmp_path / "wheelhouse"
    built = subprocess.run([sys.executable, "-m", "dkilab.gpu.wheelhouse", "--out", str(wheels)], cwd=ROOT,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    assert sum(w.stat().st_size for w in wheels.glob("*.whl")) <= 60 * 2**20
    python = _clean_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DKILAB_DATA_DIR")}
    env |= {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1"}
    missing = subprocess.run([str(python), "-c", "import faiss"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0  # the venv holds torch, transformers and accelerate, not the project's stack
    smoke = [*offline, str(python), "-m", "dkilab.cli", "gpu", "--smoke-only", "--cpu", "--report-dir"]

    before = subprocess.run([*smoke, str(tmp_path / "without")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert before.returncode != 0 and "No module named" in before.stdout + before.stderr

    install = subprocess.run([*offline, str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                              "-r", str(wheels / "requirements.txt")], capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr[-2000:]
    after = subprocess.run([*smoke, str(tmp_path / "with")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert after.returncode == 0, (after.stdout + after.stderr)[-3000:]
    report = json.loads((tmp_path / "with" / "smoke.json").read_text())
    assert {r["check"] for r in report["rows"]} == {"kv", "batched", "kv_batched", "judge", "attention"}
    assert all(r["ok"] for r in report["rows"]) and (tmp_path / "with" / "smoke.md").exists()


def test_the_prepared_gpu_check_runs_its_path_on_the_cpu(tmp_path):
    """scripts/gpu-check.sh, the one command a lent GPU runs, tried with --cpu: smoke and bench reports land."""
    out = tmp_path / "out"
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # python3 = the project's
    done = subprocess.run(["bash", "scripts/gpu-check.sh", str(out), "--cpu"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert all(r["ok"] for r in json.loads((out / "smoke.json").read_text())["rows"])
    assert "per_question" in json.loads((out / "bench_gpu.json").read_text())["models"]["tiny-llama"]
    assert (out / "nvidia.txt").exists() and not (out / ".site").exists()
