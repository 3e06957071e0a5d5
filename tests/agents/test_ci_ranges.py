"""The agents' CI configs have ranges a broken agent falls out of: each test breaks one part on purpose
(rule cells only, so no model loads) and checks that `check_expectations` reports it. Marked slow (a
minute and a half together): `make test-slow` and CI run them."""
import pytest
from dkilab.eval.harness.experiment import ExperimentConfig, check_config, load_experiment
from dkilab.eval.harness.notes import check_expectations
from dkilab.eval.harness.runner import run_experiment

from tests.conftest import ROOT

CI = ROOT / "experiments" / "ci"


def _rule_only(name: str) -> ExperimentConfig:
    cfg = load_experiment(CI / f"{name}.yaml")
    keep = [s for s in cfg.strategies if s.key in ("rule", "hard")]
    used = {d for s in keep for d in s.datasets}
    cfg = cfg.model_copy(update={"strategies": keep, "datasets": [d for d in cfg.datasets if d.key in used],
                                 "expect": {k: v for k, v in cfg.expect.items() if k.startswith(("rule", "hard"))}})
    check_config(cfg, name)
    return cfg


def _problems(name: str, tmp_path) -> list[str]:
    cfg = _rule_only(name)
    results = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    return check_expectations(cfg, results)


@pytest.mark.slow
def test_intact_agents_pass_their_ranges(tmp_path):
    assert _problems("agents_pointers", tmp_path / "p") == []
    assert _problems("agents_recall", tmp_path / "r") == []


@pytest.mark.slow
def test_a_resolver_that_reads_siblings_fails(tmp_path, monkeypatch):
    from dkilab.agents.semantic_pointer.tree import AgentTree

    monkeypatch.setattr(AgentTree, "ancestors", lambda self, a, n=None: [x for x in self._nodes if x != a])
    assert any("distractor_rate" in p or "fallback" in p for p in _problems("agents_pointers", tmp_path))


@pytest.mark.slow
def test_a_resolver_without_the_level_limit_or_the_referent_check_fails(tmp_path, monkeypatch):
    from dkilab.agents.semantic_pointer import resolver

    monkeypatch.setattr(resolver, "referent", lambda line: 1)  # "客户服务总调度" would count as a referent
    assert any("fallback_recall" in p for p in _problems("agents_pointers", tmp_path / "a"))
    monkeypatch.undo()
    from dkilab.agents.semantic_pointer.tree import AgentTree

    monkeypatch.setattr(AgentTree, "ancestors", lambda self, a, n=None: self.get_full_path(a)[:-1][::-1])
    assert any("fallback_recall" in p for p in _problems("agents_pointers", tmp_path / "b"))


@pytest.mark.slow
def test_a_resolver_blind_to_ambiguity_or_to_other_levels_fails(tmp_path, monkeypatch):
    """Issue 32 item 4: without the ambiguity check the ambiguous trees resolve to one of two customers;
    without the supporting lines the multi-level trees lose the fact from the other level."""
    from dkilab.agents.semantic_pointer import resolver

    monkeypatch.setattr(resolver, "ambiguity", lambda *a: None)
    assert any("ambiguity_detected" in p for p in _problems("agents_pointers", tmp_path / "a"))
    monkeypatch.undo()
    monkeypatch.setattr(resolver, "supporting_lines", lambda *a, **k: [])
    problems = _problems("agents_pointers", tmp_path / "b")
    assert any("multi_level_share" in p for p in problems) and any("pointer_accuracy" in p for p in problems)


@pytest.mark.slow
@pytest.mark.parametrize("part,metric", [("adjudicate", "adjudication_accuracy"), ("is_request", "view_precision"),
                                         ("context_flag", "adjudication_accuracy")])
def test_a_recall_agent_missing_a_check_fails(tmp_path, monkeypatch, part, metric):
    from dkilab.agents.recall_agent import adjudicate, cues, reflect, synthesis

    if part == "adjudicate":
        monkeypatch.setattr(synthesis, "adjudicate", lambda state: state.conflicts)  # never decides
    elif part == "is_request":
        monkeypatch.setattr(cues, "is_request", lambda s: False)
    else:
        monkeypatch.setattr(reflect, "context_flag", lambda c, w: None)
        monkeypatch.setattr(adjudicate.cues, "HYPOTHETICAL", [])
    assert any(metric in p for p in _problems("agents_recall", tmp_path)), part
