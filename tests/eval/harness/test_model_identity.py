"""A model's identity covers its content (issue 58 item 2): two scripted files of one name, or a script
edited in place, are different models to the cell hash and to the response cache."""
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

from tests.conftest import ROOT

DIALOGUES = str(ROOT / "tests" / "data" / "scripted" / "dialogues.json")


def _run(script, uri):
    from dkilab.eval.harness.runner import run_experiment

    cfg = experiment_from_dict({"name": "ident", "model": {"spec": f"scripted:{script}", "cache": True},
                                "tracing": False, "datasets": [{"name": "scripted", "path": DIALOGUES}],
                                "strategies": [{"name": "no_memory"}]})
    (res,) = run_experiment(cfg, uri=uri, progress=False, echo=lambda *a: None)
    return expand_cells(cfg)[0].config_hash, res


def test_same_named_scripts_and_an_edited_script_never_share_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    a, b = tmp_path / "a" / "s.yaml", tmp_path / "b" / "s.yaml"
    for path, text in ((a, "first"), (b, "second")):
        path.parent.mkdir()
        path.write_text(f'default: "{text}"\n')
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    hash_a, res_a = _run(a, uri)
    hash_b, res_b = _run(b, uri)
    assert {r["prediction"] for r in res_a.rows} == {"first"} and {r["prediction"] for r in res_b.rows} == {"second"}
    a.write_text('default: "edited"\n')  # the same path, new content: a new cell, not "finished before"
    hash_c, res_c = _run(a, uri)
    assert not res_c.skipped and {r["prediction"] for r in res_c.rows} == {"edited"}
    assert len({hash_a, hash_b, hash_c}) == 3


def test_an_endpoint_model_is_identified_by_what_the_server_serves(monkeypatch):
    """Issue 58 item 2: an endpoint's identity was `openai:<model>@<url>`, so a server restarted on other
    weights under the same name reused the cells and cached responses of the old ones."""
    from dkilab.eval.harness.experiment import ModelSpec
    from dkilab.models.backends import openai_client

    from tests.fake_openai import Server

    server = Server(models=("m",), roots={"m": "/weights/qwen-a"})
    try:
        spec = ModelSpec(spec=f"openai:m@{server.url}")
        first = spec.identity()["weights"]
        openai_client._SERVED.clear()  # a new process: reads /models again (its `created` stamp differs)
        assert ModelSpec(spec=spec.spec).identity()["weights"] == first
        server.roots["m"] = "/weights/qwen-b"  # restarted on other weights, same served name
        openai_client._SERVED.clear()
        assert ModelSpec(spec=spec.spec).identity()["weights"] != first
        assert ModelSpec(spec=f"openai:nosuch@{server.url}").identity().get("weights") is None
    finally:
        server.close()
    asked = []
    real = openai_client.served_models
    monkeypatch.setattr(openai_client, "served_models", lambda *a, **k: asked.append(a) or real(*a, **k))
    down = f"openai:m@{server.url}-gone"  # a server that does not answer: asked once, not on every cell's identity
    assert [ModelSpec(spec=down).identity().get("weights") for _ in range(3)] == [None] * 3 and len(asked) == 1


def test_a_tiny_model_trained_again_in_the_same_directory_is_another_model(tmp_path, monkeypatch):
    """Issue 58 item 2: weights saved again at one path were the same model to the cell hash, the journal and
    the response cache, so the second run recorded the first model's outputs."""
    import torch
    from dkilab.eval.harness.runner import run_experiment

    from tests.eval.harness.test_placement import _save_tiny

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny"

    def run(name="retrained"):
        cfg = experiment_from_dict({"name": name, "tracing": False,
                                    "model": {"spec": str(path), "max_context": 512, "cache": True},
                                    "defaults": {"max_new_tokens": 4},
                                    "datasets": [{"name": "scripted", "path": DIALOGUES}],
                                    "strategies": [{"name": "no_memory"}]})
        (res,) = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
        return expand_cells(cfg)[0].config_hash, res

    torch.manual_seed(0)
    _save_tiny(path)
    hash_a, first = run()
    torch.manual_seed(1)
    _save_tiny(path)  # trained again into the same directory
    hash_b, second = run()
    assert hash_a != hash_b and not second.skipped
    assert second.metrics.get("response_cache_hits", 0) == 0  # no answer of the old weights reused
    _, third = run("retrained-again")  # the same weights in another experiment: the cache does answer
    assert third.metrics["response_cache_hits"] == len(third.rows) > 0
