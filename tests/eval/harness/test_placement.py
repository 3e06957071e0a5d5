"""Issue 29 (placement and memory), proven on CPU: one GPU per process under accelerate, sharding only when
asked, the judge loaded like the model under test, models and K/V blocks freed between cells, cells
grouped so each model loads once."""
import gc
import weakref

import pytest
import yaml
from dkilab.eval.harness.experiment import JudgeSpec, ModelSpec, load_experiment
from dkilab.eval.views.report import read_metrics
from dkilab.models.loading import resolve_device


@pytest.mark.parametrize("device, cuda, env, expected", [
    ("auto", True, {"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, "cuda:1"),  # accelerate rank 1: its own GPU
    ("auto", True, {}, "cuda:0"),
    ("auto", False, {"LOCAL_RANK": "1"}, "cpu"),
    ("shard", True, {}, "shard"),  # device_map="auto": one model over every GPU, asked for explicitly
    ("shard", False, {}, "cpu"),
    ("cuda:3", True, {"LOCAL_RANK": "1"}, "cuda:3"),
    ("cpu", True, {"LOCAL_RANK": "1"}, "cpu"),
])
def test_each_process_gets_its_own_device(device, cuda, env, expected):
    assert resolve_device(device, cuda_available=cuda, env=env) == expected


def test_sharding_with_several_processes_is_refused():
    with pytest.raises(ValueError, match="device: shard.*several processes"):
        resolve_device("shard", cuda_available=True, env={"WORLD_SIZE": "2"})
    with pytest.raises(ValueError):
        ModelSpec(device="gpu0")  # not a device name: refused when the config is read


def _save_tiny(path, hidden=64, layers=2):
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.models.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}")
    cfg = AutoConfig.for_model("llama", vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, hidden_size=hidden,
                               intermediate_size=hidden * 4, num_hidden_layers=layers, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_the_judge_loads_like_the_model_under_test_unless_it_says_otherwise(tmp_path):
    import torch
    from dkilab.eval.harness.prepare import make_judge

    spec = _save_tiny(tmp_path / "tiny")
    judge = make_judge(JudgeSpec(model=spec), ModelSpec(spec=spec, dtype="bf16", device="auto"))
    assert judge.model.model.dtype == torch.bfloat16 and judge.model.model.device.type == "cpu"  # auto = cpu here
    own = make_judge(JudgeSpec(model=spec, dtype="float32"), ModelSpec(spec=spec, dtype="bf16"))
    assert own.model.model.dtype == torch.float32
    # unset placement is not part of the judge's identity (the model block's dtype and device are)
    assert "dtype" not in JudgeSpec(model=spec).resolved() and JudgeSpec(model=spec,
                                                                         dtype="bf16").resolved()["dtype"] == "bf16"


def test_models_and_kv_blocks_are_freed_between_cells_and_each_model_loads_once(tmp_path, monkeypatch):
    import dkilab.models.kv as kv
    import dkilab.models.loading as loading
    from dkilab.eval.harness.runner import run_experiment

    a, b = _save_tiny(tmp_path / "a", hidden=256, layers=4), _save_tiny(tmp_path / "b", hidden=256, layers=4)
    loads, blocks = [], []
    real_load, real_encode = loading._load_hf, kv.encode_memory

    def load(spec, *args, **kw):
        # when a model loads, no other model may still be alive (the previous one was released)
        alive = [(s, ref().model.num_parameters() * 4) for s, ref in loads if ref() is not None]
        model = real_load(spec, *args, **kw)
        loads.append((spec, weakref.ref(model)))
        alive_bytes.append(sum(n for _, n in alive))
        return model

    def encode(model, text):
        block = real_encode(model, text)
        blocks.append(weakref.ref(block))
        return block

    alive_bytes = []
    monkeypatch.setattr(loading, "_load_hf", load)
    monkeypatch.setattr(kv, "encode_memory", encode)
    cfg = {"name": "placement", "tracing": False, "model": {"spec": a, "max_context": 512},
           "defaults": {"max_new_tokens": 2},
           "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 1}],
           "strategies": [{"name": "full_attention"}, {"name": "no_memory"}],
           "sweep": {"model.spec": [a, b]}}
    path = tmp_path / "placement.yaml"
    path.write_text(yaml.safe_dump(cfg))
    lines = []
    results = run_experiment(load_experiment(path), uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False,
                             echo=lines.append)
    assert all(r.status == "finished" for r in results)
    # cells are grouped by model: a, a, b, b (each model loaded once), results back in config order
    assert [spec for spec, _ in loads] == [a, b]
    assert [ln.split(": ")[0].split("] ")[1] for ln in lines if ln.startswith("[")] == [
        r.cell.label for r in results if r.cell.model.spec == a] + [r.cell.label for r in results
                                                                    if r.cell.model.spec == b]
    assert [r.cell.model.spec for r in results] == [a, b, a, b]
    assert alive_bytes == [0, 0]  # measured: no parameter bytes of another model alive when a model loads
    gc.collect()
    assert blocks and all(ref() is None for ref in blocks)  # every cached K/V block freed with its cell


def _resume_config(tmp_path, name, **model):
    cfg = {"name": name, "tracing": False, "model": {"max_context": 512, **model}, "defaults": {"max_new_tokens": 4},
           "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 12}], "strategies": [{"name": "no_memory"}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_a_cell_killed_9_mid_run_resumes_where_it_stopped_with_the_same_answers(tmp_path):
    """Issue 29 item 4: answers are journaled as they finish; after kill -9 a rerun asks only the rest,
    and the cell's predictions equal an uninterrupted run's."""
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from dkilab.eval.tracking.journal import Journal
    from dkilab.eval.views.report import run_rows

    from tests.conftest import ROOT

    name = f"resume-{uuid.uuid4().hex[:8]}"
    path, uri = _resume_config(tmp_path, name), f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "dkilab.cli", "run", str(path), "--tracking-uri", uri]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    from dkilab.eval.harness.experiment import expand_cells

    # named by the cell's hash
    journal = Journal.for_cell(uri, name, expand_cells(load_experiment(path))[0].config_hash)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and sum(len(f.read_text().splitlines()) for f in journal.files()) < 3:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    def whole(line):
        try:
            return bool(__import__("json").loads(line))
        except ValueError:
            return False  # torn by the kill
    kept = sum(whole(line) for f in journal.files() for line in f.read_text().splitlines())
    assert 3 <= kept < 12
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{kept} of 12 questions answered by a stopped run; asking the rest" in again.stdout
    assert not journal.files()  # cleared once the cell finished
    import mlflow

    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=[name],
                             filter_string="tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED'",
                             output_format="list")[0]
    resumed = [(r["qid"], r["prediction"]) for r in run_rows(run.info.run_id)]
    assert read_metrics(run, uri)["resumed_questions"] >= 3
    fresh_name = name + "-fresh"
    fresh_path = _resume_config(tmp_path, fresh_name)
    assert subprocess.run([sys.executable, "-m", "dkilab.cli", "run", str(fresh_path), "--tracking-uri", uri],
                          cwd=ROOT, capture_output=True, text=True).returncode == 0
    fresh = mlflow.search_runs(experiment_names=[fresh_name], filter_string="tags.`dkilab.kind` = 'cell'",
                               output_format="list")[0]
    assert resumed == [(r["qid"], r["prediction"]) for r in run_rows(fresh.info.run_id)]


@pytest.mark.slow  # generates a cell with the real model, then runs it again (about 40 s here)
def test_the_response_cache_answers_a_repeated_run_without_generating(tmp_path, monkeypatch, model):
    """Issue 29 item 4: `model.cache: true` keys greedy responses by model, messages, tools, memories and
    settings; a second run of the same cells (here: a new experiment name) generates nothing."""
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.models.chat import TransformersChatModel

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    import dkilab.models.response_cache as responses

    monkeypatch.setattr(responses, "_SHARED", None)
    calls = []
    real = TransformersChatModel.generate_full

    def counted(self, *a, **kw):
        calls.append(1)
        return real(self, *a, **kw)
    monkeypatch.setattr(TransformersChatModel, "generate_full", counted)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = run_experiment(load_experiment(_resume_config(tmp_path, "cached-a", cache=True)), uri=uri, progress=False,
                           echo=lambda *a: None)
    n = len(calls)
    assert n > 0 and first[0].metrics["response_cache_hits"] == 0
    second = run_experiment(load_experiment(_resume_config(tmp_path, "cached-b", cache=True)), uri=uri, progress=False,
                            echo=lambda *a: None)
    assert len(calls) == n and second[0].metrics["response_cache_hits"] == second[0].metrics["questions"]
    assert [r["prediction"] for r in second[0].rows] == [r["prediction"] for r in first[0].rows]


def test_text_cells_run_the_stock_attention_and_kv_cells_the_memory_bias(tmp_path, monkeypatch):
    """The memory-bias attention (a float mask on every call: SDPA can never take its flash or causal
    fast path) is switched on only for a cell that injects K/V, and off again for the next text cell;
    a text cell's answers are the same either way."""
    import dkilab.models.kv as kv
    from dkilab.eval.harness import cell as cell_mod
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.models.loading import load_model, loaded_keys, release_models

    session = loaded_keys()  # the session's models (fixtures) stay loaded
    spec = _save_tiny(tmp_path / "m")
    seen = []
    real_answer = cell_mod._answer

    def answer(strategy, item, conv, memory, model):
        out = real_answer(strategy, item, conv, memory, model)
        seen.append((strategy.name, model.model.config._attn_implementation))
        return out

    monkeypatch.setattr(cell_mod, "_answer", answer)
    try:
        model = load_model(spec, max_context=512)
        assert model.model.config._attn_implementation == "sdpa"  # loading leaves transformers' choice alone
        before = model.generate("alpha beta", max_new_tokens=4)
        cfg = {"name": "stock-attn", "tracing": False, "model": {"spec": spec, "max_context": 512},
               "defaults": {"max_new_tokens": 2}, "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 1}],
               "strategies": [{"name": "no_memory"}, {"name": "full_attention"}, {"name": "full_history"}]}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(cfg))
        results = run_experiment(load_experiment(path), uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False,
                                 echo=lambda _: None)
        assert all(r.status == "finished" for r in results)
        assert seen == [("no_memory", "sdpa"), ("full_attention", kv.ATTN_IMPLEMENTATION), ("full_history", "sdpa")]
        kv.check_support(model.model)  # a K/V use outside the runner switches it on by itself ...
        assert model.model.config._attn_implementation == kv.ATTN_IMPLEMENTATION
        assert model.generate("alpha beta", max_new_tokens=4) == before  # ... with the same text answers
        assert kv.stock_attention(model.model) and model.model.config._attn_implementation == "sdpa"
    finally:
        release_models(protect=session)


def test_a_missing_dataset_fails_the_cell_before_its_model_loads(tmp_path, monkeypatch):
    import dkilab.eval.harness.runner as runner
    import dkilab.models.loading as loading
    from dkilab.eval.harness.runner import run_experiment

    loads = []
    monkeypatch.setattr(runner, "missing_data", lambda *a, **k: [])  # gone after the load check
    monkeypatch.setattr(loading, "_load_hf", lambda *a, **k: loads.append(a) or (_ for _ in ()).throw(AssertionError))
    cfg = {"name": "no-data", "tracing": False, "model": {"spec": "someorg/big-model"},
           "datasets": [{"name": "locomo"}], "strategies": [{"name": "no_memory"}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    [res] = run_experiment(load_experiment(path), data_dir=tmp_path / "none", uri=f"sqlite:///{tmp_path / 'm.db'}",
                           progress=False, echo=lambda _: None)
    assert res.status == "failed" and "DatasetNotFoundError" in res.error and loads == []
