"""`dkilab bench serve` runs end to end, bounded, and reports no errors (figures are the README's, not
asserted here)."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_bench_serve_runs_and_stops_by_itself():
    if not os.environ.get("DKILAB_DATA_DIR"):
        pytest.skip("needs DKILAB_DATA_DIR (LoCoMo)")
    r = subprocess.run([sys.executable, "-m", "dkilab.cli", "bench", "serve", "--clients", "1,4", "--seconds", "0.5",
                        "--endpoints", "lexical_search,get"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(("lexical_search", "get"))]
    assert len(rows) == 4 and all(row[-2] == "0" for row in rows)  # errors column
    assert "errors: 0" in r.stdout
    iso = [line for line in r.stdout.splitlines() if line.startswith("isolation:")]
    assert len(iso) == 2 and "alone" in iso[0] and "while one tenant floods (4 clients" in iso[1]
