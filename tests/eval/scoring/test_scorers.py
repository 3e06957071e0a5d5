"""Scoring as components (issue 88 item 1): a judged metric is one file, as docs/extending.md writes it, named by
an experiment (`scorers: [...]`); adding it re-scores the stored answers and generates nothing; a name the
registry lacks, or a judged one without a judge, is refused at load time naming the key."""
import importlib.util
import re
import sys

import pytest
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict, load_experiment
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.scoring.base import METRICS
from dkilab.eval.scoring.scorers import EXTRA_SCORERS, Scorer, scorers_for

from tests.conftest import ROOT


def _example() -> str:
    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    at = text.index("A judged metric (`dkilab/eval/scoring/brief.py`)")
    return re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)


@pytest.fixture
def brief(tmp_path):
    """The docs' file, imported as the module it says it is; unregistered afterwards."""
    EXTRA_SCORERS.names(), METRICS.names()  # discovered first: the package's own modules are in
    path = tmp_path / "brief.py"
    path.write_text(_example(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("dkilab.eval.scoring.brief", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
        EXTRA_SCORERS.remove("brief")
        METRICS.remove("brief")


def _config(tmp_path, **extra):
    answers, verdicts = tmp_path / "answers.yaml", tmp_path / "judge.yaml"
    answers.write_text('default: "Paris."\n')
    verdicts.write_text('answers:\n  - {match: "one sentence", outputs: ["YES"]}\ndefault: "CORRECT"\n')
    return experiment_from_dict({
        "name": "brief", "model": {"spec": f"scripted:{answers}", "max_context": 4096}, "tracing": False,
        "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 3}], "strategies": [{"name": "no_memory"}],
        "judge": {"model": f"scripted:{verdicts}", "stress": False}} | extra)


def test_a_judged_metric_is_one_file_and_adding_it_generates_nothing(tmp_path, brief):
    uri, lines = f"sqlite:///{tmp_path / 'm.db'}", []
    (plain,) = run_experiment(_config(tmp_path), uri=uri, progress=False, echo=lines.append)
    assert "brief" not in plain.metrics and all("brief" not in r for r in plain.rows)
    named = _config(tmp_path, scorers=["brief"])
    [a], [b] = expand_cells(_config(tmp_path)), expand_cells(named)
    assert a.generation_hash == b.generation_hash and a.scoring_hash != b.scoring_hash
    assert b.resolved["metrics"]["scorers"] == {"brief": "1"} and "scorers" not in a.resolved["metrics"]
    (scored,) = run_experiment(named, uri=uri, progress=False, echo=lines.append)
    assert scored.metrics["brief"] == 1.0 and scored.metrics["judge_score"] == plain.metrics["judge_score"]
    assert [r["brief"] for r in scored.rows] == [1.0] * len(scored.rows), scored.rows
    assert any("re-scored from the answers" in line for line in lines), lines  # the model under test not asked


def test_a_cells_scorers_follow_its_config():
    names = [s.name for s in scorers_for(scorer="f1")]
    assert names == ["abstention", "metrics"] and all(isinstance(s, Scorer) for s in scorers_for())
    assert [s.name for s in scorers_for(judge=object(), imported=True)] == ["judge", "abstention", "metrics",
                                                                            "published"]


def test_an_unknown_or_judgeless_scorer_is_refused_naming_the_key(tmp_path, brief):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nscorers: [brif]\ndatasets: [{name: fixtures}]\nstrategies: [{name: no_memory}]\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: scorers.0: unknown scorer 'brif' \(did you mean 'brief'\?\)"):
        load_experiment(bad)
    bad.write_text("name: bad\nscorers: [brief]\ndatasets: [{name: fixtures}]\nstrategies: [{name: no_memory}]\n")
    with pytest.raises(ConfigError, match=r"scorers.0: scorer 'brief' asks the LLM judge: add a judge: block"):
        load_experiment(bad)
