"""Issue 34: a sample drawn with --questions-per-conversation keeps every kind of question (stratified), so
`hallucination_rate` is measured on a smoke run; configs without `sample` keep their cells' identity."""
from dkilab.eval.data.selection import select_questions, stratified
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict, with_question_limit
from dkilab.types import QAItem


def _q(i, answerable=True, category=1):
    return QAItem(f"question {i}?", "a", category=category, answerable=answerable, qid=f"q{i}")


def test_round_robin_over_kinds_in_the_original_order():
    qs = [_q(0), _q(1), _q(2, category=2), _q(3), _q(4, answerable=False), _q(5, answerable=False)]
    assert [q.qid for q in stratified(qs, 3)] == ["q0", "q2", "q4"]
    assert [q.qid for q in stratified(qs, 1)] == ["q0"]
    assert [q.qid for q in stratified(qs, 4)] == ["q0", "q1", "q2", "q4"]
    assert stratified(qs, 10) == qs and stratified(qs, None) == qs


def test_a_limited_run_draws_unanswerable_questions_and_a_plain_config_keeps_its_hash():
    cfg = experiment_from_dict({"name": "s", "datasets": [{"name": "fixtures"}], "strategies": [{"name": "no_memory"}]},
                               "<test>")
    (full,) = expand_cells(cfg)
    (limited,) = expand_cells(with_question_limit(cfg, 2))
    first = experiment_from_dict({"name": "s", "datasets": [{"name": "fixtures", "question_limit": 2}],
                                  "strategies": [{"name": "no_memory"}]}, "<test>")
    (plain,) = expand_cells(first)
    assert limited.dataset.sample == "stratified" and "sample" not in plain.resolved["dataset"]
    assert limited.generation_hash != plain.generation_hash
    drawn = [q for _, q in select_questions(limited.dataset, None)[1]]
    kept = [q for _, q in select_questions(plain.dataset, None)[1]]
    every = [q for _, q in select_questions(full.dataset, None)[1]]
    assert any(not q.answerable for q in every)
    assert any(not q.answerable for q in drawn) and not any(not q.answerable for q in kept)  # the finding of issue 34
    assert len(drawn) == len(kept)
