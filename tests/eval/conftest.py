import pytest

from tests.conftest import ROOT

SCRIPTED_CONFIG = ROOT / "experiments" / "ci" / "scripted_fact_calls.yaml"


@pytest.fixture(scope="session")
def scripted_run(tmp_path_factory):
    """The scripted fact-call config run once into a fresh SQLite store: (cfg, results, uri)."""
    import os

    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.runner import run_experiment

    uri = f"sqlite:///{tmp_path_factory.mktemp('scripted') / 'm.db'}"
    cwd = os.getcwd()
    os.chdir(ROOT)  # the config names repository-relative files
    try:
        cfg = load_experiment(SCRIPTED_CONFIG)
        results = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    finally:
        os.chdir(cwd)
    return cfg, results, uri
