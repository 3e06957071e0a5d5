import subprocess
import sys

from tests.conftest import ROOT


def test_import_dkilab_does_not_import_torch():
    code = "import sys, dkilab; dkilab.__version__; assert 'torch' not in sys.modules, 'torch imported'; " \
           "assert 'faiss' not in sys.modules and 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cli_help_and_version():
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "--version"], capture_output=True, text=True, check=True)
    import dkilab

    assert out.stdout.strip() == f"dkilab {dkilab.__version__}"
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout and "bench" in out.stdout


def test_demo_runs_and_isolates_users():
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "demo"], capture_output=True, text=True, check=True)
    assert "ingested 14 new messages" in out.stdout
    assert "对了，我不吃辣" in out.stdout
    # maya's search for lin's words finds nothing
    tail = out.stdout.split("another user's words")[1].split("\n\n")[0]
    assert "(no hits)" in tail
