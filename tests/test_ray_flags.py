"""`dkilab run`'s Ray flags are checked before anything runs (issue 85): a negative `--retries` (unlimited in Ray)
or `--gpus-per-cell`, a Ray flag without `--executor ray` (it was ignored), and an address nothing answers at
(Ray waits ~30 s, then a traceback) are each one line and exit code 2."""
import socket

import pytest
from dkilab.cli import main

from tests.conftest import ROOT

CONFIG = str(ROOT / "experiments" / "quickstart.yaml")


@pytest.mark.parametrize("flags, says", [
    (["--executor", "ray", "--retries", "-1"], "--retries: must be 0 or more, got -1"),
    (["--executor", "ray", "--gpus-per-cell", "-1"], "--gpus-per-cell: must be 0 or more, got -1"),
    (["--retries", "2"], "dkilab run: --retries only with --executor ray"),
    (["--gpus-per-cell", "1", "--ray-address", "auto"], "dkilab run: --ray-address, --gpus-per-cell only with"),
])
def test_a_bad_or_ignored_ray_flag_is_refused(flags, says, capsys):
    try:
        code = main(["run", CONFIG, *flags])
    except SystemExit as exc:  # argparse refuses a bad value
        code = exc.code
    assert code == 2 and says in capsys.readouterr().err


def test_an_address_nothing_answers_at_is_named_at_once(capsys):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["run", CONFIG, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"]) == 2
    assert f"--ray-address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in capsys.readouterr().err
