"""The judge's weights are part of a cell's identity (issue 85 item 2): a scripted judge edited under the same
file name, a judge directory trained again, another model behind the same endpoint name: the cell is judged again
(re-scored from its stored answers, not generated again), never "finished before" with the old judge_score."""
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict
from dkilab.eval.harness.runner import run_experiment


def _config(answers, verdicts):
    return experiment_from_dict({
        "name": "judge-identity", "model": {"spec": f"scripted:{answers}", "max_context": 4096}, "tracing": False,
        "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 3}], "strategies": [{"name": "no_memory"}],
        "judge": {"model": f"scripted:{verdicts}", "stress": False}})


def test_an_edited_judge_under_the_same_name_judges_the_stored_answers_again(tmp_path):
    answers, verdicts = tmp_path / "answers.yaml", tmp_path / "judge.yaml"
    answers.write_text('default: "Paris"\n')
    verdicts.write_text('default: "WRONG"\n')
    uri, lines = f"sqlite:///{tmp_path / 'm.db'}", []
    first = _config(answers, verdicts)
    [a] = expand_cells(first)
    before = a.config_hash, a.generation_hash
    (old,) = run_experiment(first, uri=uri, progress=False, echo=lines.append)
    assert old.metrics["judge_score"] == 0.0
    verdicts.write_text('default: "CORRECT"\n')  # the same name, another judge
    again = _config(answers, verdicts)
    [b] = expand_cells(again)
    assert b.config_hash != before[0] and b.generation_hash == before[1]  # judged again, not generated again
    (new,) = run_experiment(again, uri=uri, progress=False, echo=lines.append)
    assert new.metrics["judge_score"] == 1.0, lines
    assert not any("finished before" in line for line in lines) and any("re-scor" in line for line in lines), lines
