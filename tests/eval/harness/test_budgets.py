"""Budgets resolved when a config is read (issue 57): the matched history budget is what every strategy
shows; recall_v4's fact room must fit the window beside it, and a reserve that starves a cell is refused,
one line per cell with the numbers; `dkilab run CONFIG --budgets` prints every cell's parts."""
import pytest
import yaml
from dkilab.cli import main
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import load_experiment


def _write(tmp_path, **over):
    cfg = {"name": "budgets", "model": {"spec": "offline:smollm2", "max_context": 2048},
           "defaults": {"max_new_tokens": 32, "history_budget": 768},
           "datasets": [{"name": "fixtures"}],
           "strategies": [{"name": "full_history"}, {"name": "recall_v4"}]} | over
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_fact_room_sits_beside_the_matched_budget(tmp_path):
    from dkilab.eval.harness.budgets import resolve
    from dkilab.eval.harness.experiment import expand_cells

    cells = {c.strategy.key: resolve(c) for c in expand_cells(load_experiment(_write(tmp_path)))}
    assert cells["full_history"]["history"] == cells["recall_v4"]["history"] == 768
    assert cells["recall_v4"]["room"] == {"fact_calls": 800 + 3 * 32, "constraint": 150}
    assert cells["recall_v4"]["reserved"] == {} and cells["full_history"]["room"] == {}


def test_the_seeds_accounting_that_starves_recall_v4_is_refused(tmp_path):
    """The old default: 800 + 96 + 150 taken out of a 768-token budget left recall_v4 nothing."""
    seed = {"name": "recall_v4", "params": {"recall": {"budget": {"reserve_from_history": True}}}}
    with pytest.raises(ConfigError) as e:
        load_experiment(_write(tmp_path, strategies=[{"name": "full_history"}, seed]))
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and "budget: cell recall_v4@fixtures: starved" in lines[0]
    assert "fact_calls 896 + constraint 150" in lines[0] and "matched history budget 768 leave 0" in lines[0]


def test_a_fact_room_that_does_not_fit_the_window_is_refused_with_its_numbers(tmp_path):
    sweep = {"params.history_budget": [512, 1024]}
    with pytest.raises(ConfigError) as e:
        load_experiment(_write(tmp_path, sweep=sweep, defaults={"max_new_tokens": 32}))
    lines = str(e.value).splitlines()
    assert len(lines) == 1, lines  # only the 1,024 recall_v4 cell: 512 fits, full_history has no room
    assert "recall_v4@fixtures[history_budget=1024]" in lines[0] and "> window 2048" in lines[0]
    assert "history 1024 +" in lines[0] and "fact_calls 896 + constraint 150 + generation 32" in lines[0]


def test_max_new_tokens_that_leave_no_room_for_a_question_are_refused_when_read(tmp_path):
    """Issue 85: a max_new_tokens over the window passed the check, then every question failed (exit 1)."""
    with pytest.raises(ConfigError) as e:
        load_experiment(_write(tmp_path, defaults={"max_new_tokens": 2048}, strategies=[{"name": "no_memory"}]))
    [line] = str(e.value).splitlines()
    assert "cell no_memory@fixtures: max_new_tokens 2048 + question and instructions ~" in line
    assert ">= window 2048" in line and "no question would fit" in line
    assert main(["run", str(_write(tmp_path, defaults={"max_new_tokens": 2048}))]) == 2  # a config error, not a run


def test_run_budgets_prints_every_cell_and_runs_nothing(tmp_path, capsys):
    seed = {"name": "recall_v4", "label": "seed", "params": {"recall": {"budget": {"reserve_from_history": True}}}}
    path = _write(tmp_path, strategies=[{"name": "full_history"}, {"name": "recall_v4"}, seed])
    assert main(["run", str(path), "--budgets", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["cell", "window", "fixed"] and len(out) == 4
    rows = {line.split()[0]: line for line in out[1:]}
    assert "room fact_calls 896, room constraint 150" in rows["recall_v4@fixtures"]
    assert rows["seed@fixtures"].endswith("REFUSED") and " 768        0 " in rows["seed@fixtures"]
    assert not (tmp_path / "m.db").exists()
