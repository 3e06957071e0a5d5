"""The smoke stage of `dkilab gpu`: minutes that prove the parts a long run rests on, on the device and
in the dtype the run will use, before hours are spent.

- `kv`: K/V injection on the offline model and on tiny random-weight models of every common
  architecture: alpha = 1 equals the memory text in front, alpha -> 0 converges to alpha = 0, and the
  memory changes the output at all (bf16 tolerances on a GPU);
- `batched`: batched greedy generation gives each prompt's unbatched tokens;
- `judge`: the judge loads on the device like the model and its batched verdicts equal one-by-one ones;
- `accelerate`: `accelerate launch --num_processes 2` runs a two-cell config (a text and a K/V
  strategy, judged), each process on its own device, both shards gathered.
Each check returns a row {check, ok, detail, seconds}; a failing check never raises.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMORY = "earlier the user said my cat is called pixel and she is grey . she lives in lisbon ."
PROMPT = "what is my cat called ? your cat is called"
# (alpha = 1 vs the text in front, alpha 1e-6 vs 0) as max |logit difference| / KL: fp32 exact, bf16 rounding.
# SmolLM2 in fp32: KL to alpha 0 is 2.3e-3 nats at alpha 1e-4, 8e-7 at 1e-6, 2.5e-7 at 1e-8 (converging)
TOLERANCE = {"float32": (1e-3, 1e-4), "bfloat16": (0.25, 2e-2), "float16": (0.1, 1e-2)}


def _kl(p, q) -> float:
    import torch

    return float(torch.sum(torch.softmax(p, -1) * (torch.log_softmax(p, -1) - torch.log_softmax(q, -1))))


def kv_figures(model) -> dict:
    """On `model` (a TransformersChatModel): max |logit difference| between alpha = 1 and the memory text in
    front, KL(alpha 1e-6 || alpha 0) (continuity) and KL(alpha 1 || alpha 0) (the memory matters)."""
    import torch

    from dkilab.models.kv import encode_memory, next_token_logits

    mem = encode_memory(model, MEMORY)
    hf = model.model
    ids = [mem.sink_id, *mem.token_ids, *model.encode(PROMPT)]
    with torch.inference_mode():
        ref = hf(input_ids=torch.tensor([ids], device=hf.device)).logits[0, -1].float()
    one = next_token_logits(model, PROMPT, [(mem, 1.0)])
    zero, tiny = next_token_logits(model, PROMPT, [(mem, 0.0)]), next_token_logits(model, PROMPT, [(mem, 1e-6)])
    return {"max_dlogit": float((one - ref).abs().max()), "kl_tiny_vs_zero": _kl(tiny, zero),
            "kl_one_vs_zero": _kl(one, zero)}


def memory_matters(fig: dict) -> bool:
    """alpha = 1 moves the output at least 10x further from alpha 0 than alpha 1e-6 does (relative: a tiny
    random-weight model's memory moves its near-uniform output by only ~1e-3 nats)."""
    return fig["kl_one_vs_zero"] > 10 * max(fig["kl_tiny_vs_zero"], 1e-7)


def kv_check(model, dtype: str) -> str | None:
    """None when the alpha properties hold on `model` (a TransformersChatModel), else what broke."""
    exact, near = TOLERANCE[dtype]
    fig = kv_figures(model)
    if (diff := fig["max_dlogit"]) > exact:
        return f"alpha = 1 differs from the memory text in front by {diff:.3g} (> {exact})"
    if (k := fig["kl_tiny_vs_zero"]) > near:
        return f"alpha 1e-6 is {k:.3g} nats from alpha 0 (> {near}): not continuous"
    if not memory_matters(fig):
        return "the memory changes nothing at alpha = 1"
    return None


def _row(name: str, fn) -> dict:
    t = time.perf_counter()
    try:
        detail = fn()
        ok = not (isinstance(detail, str) and detail.startswith("FAIL"))
    except Exception as e:  # noqa: BLE001 - a smoke check reports, never stops the stage
        ok, detail = False, f"FAIL {type(e).__name__}: {e}"
    return {"check": name, "ok": ok, "detail": str(detail), "seconds": round(time.perf_counter() - t, 1)}


def check_kv(device: str, dtype: str) -> dict:
    def run():
        from dkilab.models import load_model
        from dkilab.models.chat import TransformersChatModel
        from dkilab.models.kv import KVUnsupportedError, prepare_model
        from dkilab.models.tiny import ARCHITECTURES, tiny_model

        failed, refused = [], []
        problem = kv_check(load_model("offline:smollm2", dtype=dtype, device=device, max_context=1024), dtype)
        if problem:
            failed.append(f"offline:smollm2: {problem}")
        for arch in ARCHITECTURES:
            attn = "eager" if arch == "gemma2" else "sdpa"
            hf, tok = tiny_model(arch, attn=attn, dtype=dtype, device=_torch_device(device))
            try:
                problem = kv_check(TransformersChatModel(prepare_model(hf, attn), tok, name=f"tiny-{arch}"), dtype)
            except KVUnsupportedError as e:
                refused.append(f"{arch} ({e})")
                continue
            if problem:
                failed.append(f"{arch}: {problem}")
        if failed:
            return "FAIL " + "; ".join(failed)
        return f"offline:smollm2 + {len(ARCHITECTURES) - len(refused)} architectures exact and continuous in {dtype}"
    return _row("kv", run)


def _torch_device(device: str) -> str:
    from dkilab.models.loading import resolve_device

    d = resolve_device(device)
    return "cuda:0" if d == "shard" else d


def check_batched(device: str, dtype: str, batch: int = 4) -> dict:
    def run():
        from dkilab.models import load_model

        model = load_model("offline:smollm2", dtype=dtype, device=device, max_context=1024)
        prompts = [[{"role": "user", "content": q}] for q in
                   ("What is the capital of France?", "Name a colour.", "Count to five.", "Who wrote Hamlet?")][:batch]
        together = [g.text for g in model.generate_batch(prompts, max_new_tokens=12)]
        alone = [model.generate_full(p, max_new_tokens=12).text for p in prompts]
        differ = [i for i, (a, b) in enumerate(zip(together, alone)) if a != b]
        if differ:
            return f"FAIL batched != unbatched for prompts {differ}: {together[differ[0]]!r} vs {alone[differ[0]]!r}"
        return f"{len(prompts)} prompts: batched = unbatched, token for token"
    return _row("batched", run)


def check_judge(device: str, dtype: str) -> dict:
    def run():
        from dkilab.eval.harness.experiment import JudgeSpec, ModelSpec
        from dkilab.eval.harness.prepare import make_judge

        judge = make_judge(JudgeSpec(model="offline:smollm2", max_context=1024), ModelSpec(dtype=dtype, device=device))
        where = str(judge.model.model.device)
        want = _torch_device(device)
        if where.split(":")[0] != want.split(":")[0]:
            return f"FAIL the judge loaded on {where}, the model runs on {want}"
        texts = [judge.prompt.format(question="Where is Paris?", gold="France", prediction=p)
                 for p in ("France", "Spain")]
        judge.prefetch(texts, batch_size=2)
        batched = [judge.replies[t] for t in texts]
        judge.replies.clear()
        alone = [judge._reply(t) for t in texts]
        if batched != alone:
            return f"FAIL batched verdicts {batched} != one-by-one {alone}"
        return f"judge on {where} in {judge.model.model.dtype}; batched verdicts = one-by-one"
    return _row("judge", run)


SMOKE_CONFIG = {
    "name": "gpu-smoke", "tracing": False,
    "defaults": {"max_new_tokens": 4},
    "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 4}],
    "strategies": [{"name": "full_history"}, {"name": "full_attention"}],
}


def check_accelerate(device: str, dtype: str, gpus: int, workdir: Path | None = None) -> dict:
    def run():
        import mlflow
        import yaml

        if device != "cpu" and gpus < 2:
            return f"skipped: {gpus} GPU (two processes need two GPUs; --cpu runs them on gloo)"
        work = Path(workdir or tempfile.mkdtemp(prefix="dkilab-smoke-"))
        work.mkdir(parents=True, exist_ok=True)
        cfg = SMOKE_CONFIG | {"model": {"spec": "offline:smollm2", "dtype": dtype, "device": device,
                                        "max_context": 1024},
                              "judge": {"model": "offline:smollm2", "max_context": 1024}}
        path = work / "smoke.yaml"
        path.write_text(yaml.safe_dump(cfg))
        uri = f"sqlite:///{work / 'mlflow.db'}"
        launcher = Path(sys.executable).parent / "accelerate"
        cmd = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "dkilab.cli", "run", str(path),
               "--tracking-uri", uri]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            return f"FAIL accelerate launch exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"
        client = mlflow.MlflowClient(uri)
        exp = client.get_experiment_by_name("gpu-smoke")
        runs = client.search_runs([exp.experiment_id], "tags.`dkilab.kind` = 'cell'")
        bad = [r.info.run_name for r in runs if r.info.status != "FINISHED" or r.data.metrics.get("questions") != 4]
        judged = out.stderr.count("judged its answers")
        if len(runs) != 2 or bad or judged != 4:
            return f"FAIL cells {[r.info.run_name for r in runs]}, unfinished or short {bad}, judge lines {judged}"
        return "2 processes: both cells finished with 4 of 4 questions; each process judged its own answers"
    return _row("accelerate", run)


def run_smoke(device: str, dtype: str, gpus: int, echo=print, workdir: Path | None = None) -> list[dict]:
    rows = []
    for check in (lambda: check_kv(device, dtype), lambda: check_batched(device, dtype),
                  lambda: check_judge(device, dtype), lambda: check_accelerate(device, dtype, gpus, workdir)):
        row = check()
        echo(f"  smoke {row['check']:<10} {'ok  ' if row['ok'] else 'FAIL'} {row['seconds']:>6.1f} s  "
             f"{row['detail'].removeprefix('FAIL ')}")
        rows.append(row)
    return rows
