"""Experiment configs are checked when they are read (file + dotted key, one line), and a cell's
identity covers everything that decides its result."""
import subprocess
import sys

import pytest
import yaml
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import (
    apply_overrides,
    check_config,
    expand_cells,
    load_experiment,
    parse_set,
    with_question_limit,
)
from pydantic import Field

from tests.conftest import ROOT


def _write(tmp_path, name="cfg", **extra):
    data = {"name": name, "model": {"max_context": 1536}, "defaults": {"max_new_tokens": 2, "history_budget": 256},
            "tracing": False,
            "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}],
            "strategies": [{"name": "no_memory"}, {"name": "recall_v4", "label": "v4"}]} | extra
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.parametrize("extra, pattern", [
    ({"defaults": {"max_new_token": 2}},
     r"cfg\.yaml: defaults\.max_new_token: no strategy .*did you mean 'max_new_tokens'"),
    ({"sweep": {"params.preference_alpah": [0.2, 0.6]}},
     r"cfg\.yaml: sweep\.params\.preference_alpah: .*did you mean 'preference_alpha'"),
    ({"sweep": {"v4.histry_budget": [1, 2]}},
     r"sweep\.v4\.histry_budget: strategy 'v4' has no parameter 'histry_budget'.*history_budget"),
    ({"sweep": {"v4.recall.summary.per_message_treshold": [60]}},
     r"cfg\.yaml: invalid params of strategies\.1 \(v4\) at sweep point.*"
                                                                  r"params\.recall\.summary\.per_message_treshold: "
                                                                  r"unknown key \(did you mean "
                                                                  r"'per_message_threshold'\?\)"),
    ({"sweep": {"v4.recall.summary.per_message_threshold": [60, -1]}},
     r"sweep point \{'v4\.recall\.summary\.per_message_threshold': -1\}.*"
     r"per_message_threshold: Input should be greater"),
    ({"strategies": [{"name": "recall_v4", "params": {"recall": {"summary": {"strategy": "magic"}}}}]},
     r"params\.recall\.summary\.strategy"),
    ({"strategies": [{"name": "recal_v4"}]},
     r"cfg\.yaml: strategies\.0\.name: unknown strategy 'recal_v4' \(did you mean 'recall_v4'\?\)"),
    ({"datasets": [{"name": "locomoo"}]}, r"datasets\.0: unknown dataset 'locomoo' \(did you mean 'locomo'\?\)"),
    ({"sweep": {"nothing.x": [1]}}, r"sweep\.nothing\.x"),
    ({"sweep": {"model.max_contxt": [1024]}}, r"sweep\.model\.max_contxt: model has no field"),
    ({"expect": {"v5": {"score": [0, 1]}}}, r"expect\.v5: no strategy with that label"),
    ({"expect": {"v4@fixturez": {"score": [0, 1]}}},
     r"expect\.v4@fixturez: no dataset 'fixturez'.*did you mean 'fixtures'"),
    ({"strategies": [{"name": "no_memory", "datasets": ["small"]}]},
     r"strategies\.0\.datasets: no dataset labelled 'small'"),
    ({"strategies": [{"name": "recall_v4", "params": {"reference": {"config": "/nonexistent/ref.yaml"}}}]},
     r"strategies\.0 \(recall_v4\): .*ref\.yaml does not exist"),
    ({"judge": {"prompt": "no placeholders"}}, r"judge.*placeholder"),
    ({"datasets": [{"name": "fixtures", "scorer": "bleu"}]}, r"datasets\.0\.scorer: unknown scorer 'bleu'"),
    ({"model": {"spec": "nosuch:model"}},
     r"cfg\.yaml: model\.spec: unknown model loader 'nosuch' in 'nosuch:model'.*registered: "),
    ({"model": {"spec": "opneai:m@http://x"}}, r"model\.spec: unknown model loader 'opneai'.*did you mean 'openai'"),
    ({"sweep": {"model.spec": ["offline:smollm2", "nosuch:x"]}}, r"sweep\.model\.spec: unknown model loader 'nosuch'"),
    ({"judge": {"model": "nosuch:judge"}}, r"judge\.model: unknown model loader 'nosuch'"),
    # issue 34: a typo in an offline model's name is caught when the file is read, not in every cell
    ({"model": {"spec": "offline:smolm2"}},
     r"model\.spec: unknown offline model 'offline:smolm2' \(did you mean 'offline:smollm2'\?\)"),
    ({"max_error_rate": 1.5}, r"max_error_rate"),
])
def test_config_errors_name_the_file_and_the_dotted_key(tmp_path, extra, pattern):
    with pytest.raises(ConfigError, match=pattern) as err:
        load_experiment(_write(tmp_path, **extra))
    assert "\n" not in str(err.value)


def test_duplicate_yaml_keys_and_bad_overrides_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\ndatasets: [{name: fixtures}]\nstrategies: [{name: no_memory}]\nname: again\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml: not valid YAML \(line 4.*duplicate key 'name'"):
        load_experiment(path)
    cfg = _write(tmp_path)
    with pytest.raises(ConfigError,
                       match=r"--set strategies\.5\.params\.x: the config has 2 strategies \(indexes 0-1\)"):
        load_experiment(cfg, {"strategies.5.params.x": 3})
    with pytest.raises(ConfigError, match=r"datasets\.0\.question_limit"):
        load_experiment(cfg, {"datasets.0.question_limit": -1})
    with pytest.raises(ConfigError, match=r"params of strategies\.1 \(v4\).*params\.max_results"):
        load_experiment(cfg, {"strategies.1.params.max_results": 0})
    assert load_experiment(cfg, {"strategies.1.params.max_results": 7}).strategies[1].params == {"max_results": 7}
    assert parse_set(["params.preference_alpha=0.2", "model.spec=offline:smollm2"]) == {
        "params.preference_alpha": 0.2, "model.spec": "offline:smollm2"}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set(["oops"])
    loaded = load_experiment(cfg)
    for bad in (0, -1):
        with pytest.raises(ConfigError, match=r"--questions-per-conversation \(--limit\)"):
            with_question_limit(loaded, bad)
    assert all(d.question_limit == 1 for d in with_question_limit(loaded, 1).datasets)
    assert apply_overrides({"a": {"b": 1}}, {"a.c": 2}) == {"a": {"b": 1, "c": 2}}


def test_cli_user_errors_are_one_line_with_exit_code_2(tmp_path):
    bad = _write(tmp_path, defaults={"max_new_token": 2})
    cmd = [sys.executable, "-m", "dkilab.cli"]
    out = subprocess.run(cmd + ["run", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"dkilab: error: {bad}: defaults.max_new_token: no strategy of this "
                                                "experiment has a parameter 'max_new_token' (did you mean "
                                                "'max_new_tokens'?)"]
    debug = subprocess.run(cmd + ["--debug", "run", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    for args in (["run", str(_write(tmp_path, "ok")), "--limit", "0"], ["run", str(_write(tmp_path, "ok")), "--limit",
                                                                        "-1"], []):
        out = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr)
    missing = subprocess.run(cmd + ["run", str(tmp_path / "nope.yaml")], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.yaml does not exist" in missing.stderr
    latin1 = tmp_path / "latin1.yaml"  # issue 28 item 12: a non-UTF-8 file is a user error, not a traceback
    latin1.write_bytes(
        "name: caf\xe9\ndatasets: [{name: fixtures}]\nstrategies: [{name: no_memory}]\n".encode("latin-1"))
    out = subprocess.run(cmd + ["run", str(latin1)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"dkilab: error: {latin1}: not UTF-8 text (byte 9: invalid continuation byte); save it as UTF-8"]


def test_sweep_grid_applies_keys_where_they_belong(tmp_path):
    cfg = load_experiment(_write(tmp_path, strategies=[{"name": "no_memory"}, {"name": "stable"}],
                                 sweep={"params.preference_alpha": [0.2, 0.6], "stable.recent_turns": [1, 3]}))
    cells = expand_cells(cfg)
    # no_memory has neither parameter: one cell; stable: 2 x 2
    assert sorted(c.strategy.name for c in cells) == ["no_memory"] + ["stable"] * 4
    assert {(c.params.preference_alpha, c.params.recent_turns) for c in cells if c.strategy.name == "stable"} == {
        (0.2, 1), (0.2, 3), (0.6, 1), (0.6, 3)}
    assert len({c.config_hash for c in cells}) == 5


def test_a_cells_identity_is_its_resolved_config(tmp_path, monkeypatch):
    import dkilab.strategies.base as base
    from dkilab.strategies.recall_v4 import RecallV4

    plain = expand_cells(load_experiment(_write(tmp_path, "a")))[1]
    explicit = expand_cells(load_experiment(_write(
        tmp_path, "b", strategies=[{"name": "no_memory"}, {"name": "recall_v4", "label": "v4",
                                                           "params": {"preference_alpha": 0.4,
                                                                      "recall": {"enabled": True}}}])))[1]
    assert plain.config_hash == explicit.config_hash  # a default written out is the same cell
    resolved = plain.resolved
    assert resolved["strategy"]["params"]["recall"]["summary"]["per_message_threshold"] == 200  # every default filled
    assert resolved["dataset"]["scorer"] == "auto" and resolved["dataset"]["version"]
    assert resolved["metrics"]["abstention_detector"]["name"] == "hybrid"
    assert "system.en" in plain.prompts() and "formatter.constraint.en" in plain.prompts()
    no_memory = expand_cells(load_experiment(_write(tmp_path, "c")))[0]
    other_embedder = expand_cells(load_experiment(_write(tmp_path, "d", embedder={"model": "/models/e5"})))[0]
    assert no_memory.config_hash != other_embedder.config_hash
    assert other_embedder.resolved["embedder"]["model"] == "/models/e5"
    recall_only = load_experiment(_write(tmp_path, "e", strategies=[{"name": "recall_only"}]))
    other_model = load_experiment(_write(tmp_path, "f", strategies=[{"name": "recall_only"}],
                                         model={"max_context": 4096}))
    # no model: not part of it
    assert expand_cells(recall_only)[0].config_hash == expand_cells(other_model)[0].config_hash
    # a changed default in code, a new strategy version or a changed prompt: a different cell
    class NewDefault(RecallV4.Params):
        preference_alpha: float = Field(0.5, ge=0.0)

    monkeypatch.setattr(RecallV4, "Params", NewDefault)
    changed = expand_cells(load_experiment(_write(tmp_path, "g")))[1]
    assert changed.params.preference_alpha == 0.5 and changed.config_hash != plain.config_hash
    monkeypatch.undo()
    assert expand_cells(load_experiment(_write(tmp_path, "h")))[1].config_hash == plain.config_hash
    monkeypatch.setattr(RecallV4, "version", "99")
    assert expand_cells(load_experiment(_write(tmp_path, "i")))[1].config_hash != plain.config_hash
    monkeypatch.undo()
    monkeypatch.setitem(base.SYSTEM, "en", base.SYSTEM["en"] + " Be brief.")
    assert expand_cells(load_experiment(_write(tmp_path, "j")))[1].config_hash != plain.config_hash


EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[str(p.relative_to(ROOT / "experiments")) for p in EXPERIMENTS])
def test_every_experiment_config_validates(path, monkeypatch):
    from dkilab.eval.harness.budgets import resolve

    if "prompts_from: longmemeval/" in path.read_text():  # LongMemEval's script, under the data dir: the stand-in
        monkeypatch.setenv("DKILAB_DATA_DIR", str(ROOT / "tests" / "data"))
    cells = expand_cells(load_experiment(path))
    assert cells and len({c.label for c in cells}) == len(cells)
    for cell in cells:  # no cell is starved: every strategy shows the whole matched history budget, but what the
        r = resolve(cell)  # seed's §2.3 accounting (`seed: true`) asks for: its reserves taken from it, no more
        assert r["history"] == r["matched"] - sum(r["reserved"].values()), r
        assert not r["reserved"] or (cell.params.recall.budget.reserve_from_history
                                     and r["history"] >= r["matched"] // 2), r


def test_strategies_run_on_the_datasets_they_name(tmp_path):
    path = _write(tmp_path, datasets=[{"name": "fixtures", "limit": 1}, {"name": "fixtures", "label": "small",
                                                                         "limit": 1,
                                                                          "question_limit": 1}],
                  strategies=[{"name": "no_memory"}, {"name": "recall_v4", "label": "v4", "datasets": ["small"]}],
                  expect={"v4@small": {"errors": [0, 0]}})
    cells = expand_cells(load_experiment(path))
    assert sorted(c.label for c in cells) == ["no_memory@fixtures", "no_memory@small", "v4@small"]
    small = next(c for c in cells if c.label == "no_memory@small")
    assert "label" not in small.resolved["dataset"]  # a label names cells; it does not change what they run


def test_a_strategy_may_run_with_its_own_embedder_keys(tmp_path):
    """An ablation row on other stores (`embedder: {with_previous_turn: false}` on one strategy): its cells
    resolve to that index text and carry it in their identity; the other strategies keep the experiment's."""
    path = _write(tmp_path, embedder={"model": "offline:minilm"},
                  strategies=[{"name": "recall_only", "label": "prev"},
                              {"name": "recall_only", "label": "alone", "embedder": {"with_previous_turn": False}}])
    prev, alone = expand_cells(load_experiment(path))
    assert (alone.embedder.index_text, prev.embedder.index_text) == ("1", "2")
    assert alone.config_hash != prev.config_hash and alone.resolved["embedder"]["with_previous_turn"] is False
    bad = _write(tmp_path, "bad", strategies=[{"name": "recall_only", "embedder": {"with_previous_trun": True}}])
    with pytest.raises(ConfigError, match=r"bad\.yaml.*embedder.*with_previous_trun"):
        load_experiment(bad)


def test_multiple_choice_questions_show_their_options():
    from dkilab.eval.harness.cell import question_text
    from dkilab.types import QAItem

    item = QAItem("我的上司是哪个学校毕业的？", "D", choices={"B": "专科", "A": "本科", "D": "高中"})
    assert question_text(item) == "我的上司是哪个学校毕业的？\nA. 本科\nB. 专科\nD. 高中\n请只回答一个选项的字母。"
    assert question_text(QAItem("Where?", "Paris")) == "Where?"


def test_dev_and_test_splits_are_the_two_halves_of_the_conversations_over_one_store(tmp_path):
    """Tune on dev, report on test: the questions of the first and the second half of the conversations
    (in loader order); both halves search the same store (every conversation), so it is built once."""
    from dkilab.eval.data.selection import select_questions

    def cells(split):
        cfg = load_experiment(_write(tmp_path, f"s-{split}", strategies=[{"name": "recall_only"}],
                                     datasets=[{"name": "fixtures", "split": split}]))
        return check_config(cfg)[0]

    full, dev, test = cells("full"), cells("dev"), cells("test")
    convs, items = select_questions(full.dataset, None)
    _, dev_items = select_questions(dev.dataset, None)
    test_convs, test_items = select_questions(test.dataset, None)
    half = (len(convs) + 1) // 2
    assert {c.conversation_id for c, _ in dev_items} == {c.conversation_id for c in convs[:half]}
    assert {c.conversation_id for c, _ in test_items} == {c.conversation_id for c in convs[half:]}
    assert len(dev_items) + len(test_items) == len(items) and dev_items and test_items
    assert [c.conversation_id for c in test_convs] == [c.conversation_id for c in convs]  # the store: all of them
    assert dev.label.endswith("@fixtures:dev") and dev.config_hash != test.config_hash != full.config_hash
