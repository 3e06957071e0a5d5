"""Questions in flight together (an endpoint's `concurrency`, a local model's `batch_size`): the same
rows as one at a time, really concurrent, and Ctrl-C stops at once instead of answering the rest."""
import threading
import time

import pytest
import yaml
from dkilab.eval.harness.runner import run_experiment

from tests.eval.harness.test_runner import _statuses

QUIET = {"progress": False, "echo": lambda *a: None}


def _config(tmp_path, concurrency: int, name: str):
    from dkilab.eval.harness.experiment import load_experiment

    script = tmp_path / "script.yaml"
    script.write_text('answers:\n  - {match: "猫", outputs: ["咪咪"]}\ndefault: "I do not know."\n')
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "tracing": False, "model": {"spec": f"scripted:{script}", "concurrency": concurrency},
        "datasets": [{"name": "fixtures"}], "strategies": [{"name": "no_memory"}]}))
    return load_experiment(path)


def test_in_flight_gives_the_same_rows_and_really_overlaps(tmp_path, monkeypatch):
    import dkilab.eval.harness.cell as cell_mod

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    one = run_experiment(_config(tmp_path, 1, "seq"), uri=uri, **QUIET)[0].rows
    real, live, peak, lock = cell_mod._answer, [0], [0], threading.Lock()

    def slow(*a, **kw):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.02)
        try:
            return real(*a, **kw)
        finally:
            with lock:
                live[0] -= 1

    monkeypatch.setattr(cell_mod, "_answer", slow)
    four = run_experiment(_config(tmp_path, 4, "par"), uri=uri, **QUIET)[0].rows
    assert peak[0] == 4
    strip = lambda rows: [(r["qid"], r["prediction"], r["score"]) for r in rows]  # noqa: E731
    assert strip(four) == strip(one) and len(one) == 48


def test_ctrl_c_with_questions_in_flight_stops_without_answering_the_rest(tmp_path, monkeypatch):
    import dkilab.eval.harness.cell as cell_mod

    real, calls, lock = cell_mod._answer, [], threading.Lock()

    def interrupted(*a, **kw):
        with lock:
            calls.append(1)
            n = len(calls)
        if n == 6:
            raise KeyboardInterrupt
        time.sleep(0.6 if n == 4 else 0.05)  # the main thread waits on question 4 while 6 is interrupted
        return real(*a, **kw)

    monkeypatch.setattr(cell_mod, "_answer", interrupted)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_config(tmp_path, 3, "ctrlc"), uri=uri, **QUIET)
    time.sleep(0.3)  # the questions already running finish; nothing new starts
    # the two other workers may be inside a question when 6 is interrupted; none starts one after (before the
    # stop flag, the free workers went on through the queue while the main thread waited on question 4)
    assert len(calls) <= 6 + 2, len(calls)
    assert _statuses(uri, "ctrlc") == [("no_memory@fixtures", "KILLED", None)]


@pytest.mark.slow  # 36-43 s of SmolLM2: the default run stays under 8 minutes
def test_a_kv_cell_with_batch_size_gives_the_rows_of_one_question_at_a_time(tmp_path, monkeypatch):
    """full_attention on SmolLM2: `batch_size: 4` decodes questions with different history blocks together
    (`models.kv_batch`); every prediction and token count equals the unbatched cell's."""
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.models import kv_batch

    sizes = []
    real = kv_batch.decode_many
    monkeypatch.setattr(kv_batch, "decode_many", lambda m, rows, *a, **k: sizes.append(len(rows)) or real(m, rows, *a,
                                                                                                         **k))

    def config(batch: int):
        path = tmp_path / f"kv{batch}.yaml"
        path.write_text(yaml.safe_dump({
            "name": f"kv{batch}", "tracing": False, "defaults": {"max_new_tokens": 8},
            "model": {"spec": "offline:smollm2", "max_context": 2048, "batch_size": batch},
            "datasets": [{"name": "fixtures", "limit": 2, "question_limit": 4}],
            "strategies": [{"name": "full_attention"}]}))
        return load_experiment(path)

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    one = run_experiment(config(1), uri=uri, **QUIET)[0].rows
    four = run_experiment(config(4), uri=uri, **QUIET)[0].rows
    keep = ("qid", "prediction", "prompt_tokens", "injected_tokens", "generated_tokens")
    assert [{k: r.get(k) for k in keep} for r in four] == [{k: r.get(k) for k in keep} for r in one]
    assert len(one) == 8 and any(r["injected_tokens"] for r in one) and max(sizes) > 1
