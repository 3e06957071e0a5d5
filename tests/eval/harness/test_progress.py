"""Progress a person can read (issue 83 item 1): questions done of the total, the rate and the time left, as a
bar on a terminal and as a line at the first question and then every $DKILAB_PROGRESS_EVERY seconds in a log."""
import io
import os
import subprocess
import sys

from dkilab.progress import Progress

from tests.conftest import ROOT


def test_a_log_gets_a_line_at_the_first_item_then_every_interval(monkeypatch):
    monkeypatch.setenv("DKILAB_PROGRESS_EVERY", "3600")
    out = io.StringIO()  # not a terminal
    bar = Progress(4, "cell@data", stream=out)
    for _ in range(4):
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("cell@data: 1/4 questions (") and "left" in lines[0]
    assert lines[1].startswith("cell@data: 4/4 questions") and "left" not in lines[1]  # the last one, always
    quiet = io.StringIO()
    Progress(4, "off", stream=quiet, enabled=False).update()
    assert quiet.getvalue() == ""


def test_a_ci_configs_log_shows_each_cells_questions_as_they_finish(tmp_path):
    env = dict(os.environ, DKILAB_PROGRESS_EVERY="0", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'm.db'}")
    run = subprocess.run([sys.executable, "-m", "dkilab.cli", "run", "experiments/ci/scripted_fact_calls.yaml"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    log = run.stderr.splitlines()
    for cell in ("recall_v4@scripted", "native@scripted"):
        mine = [line for line in log if line.startswith(f"{cell}: ") and " questions (" in line]
        assert mine and mine[0].startswith(f"{cell}: 1/") and mine[-1].split()[1].split("/")[0] == \
            mine[-1].split()[1].split("/")[1], mine
    assert "\r" not in run.stderr  # lines, not a bar redrawn in place
