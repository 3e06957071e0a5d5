"""`dkilab gpu`: from checks to report in one unattended, resumable command.

    dkilab gpu                      # the comparison configs of experiments/gpu/ on this machine's GPUs
    dkilab gpu --plan-only          # checks, smoke stage, plan; nothing is run
    dkilab gpu --cpu CONFIG ...     # the same on CPU (CI proves the path with small configs)

Stages: (1) the device, in one line when there is none; (2) preflight: every config, every model's
weights, every dataset, before a model loads; (3) the smoke stage (`smoke.py`); (4) the plan with
measured throughput (`plan.py`); (5) each config in turn, under `accelerate launch` with one process per
GPU when there are several (a failing config does not stop the next; a rerun skips finished cells and
resumes a cell question by question); (6) one report folder: per experiment the table, the paired
differences, the per-category view and the plots, plus the smoke results, the plan and an index.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dkilab.eval.harness.experiment import parse_set
from dkilab.eval.tracking.store_uri import tracking_uri
from dkilab.gpu.plan import build_plan, measure, plan_table
from dkilab.gpu.preflight import cuda_missing, preflight
from dkilab.gpu.smoke import run_smoke
from dkilab.models.loading import load_model

GPU_CONFIGS = ("experiments/gpu/locomo_strategies.yaml", "experiments/gpu/sweep_threshold_budget.yaml",
               "experiments/gpu/kv_alpha.yaml", "experiments/gpu/claim_fact_calls.yaml",
               "experiments/gpu/claim_flat_vs_summary.yaml", "experiments/gpu/claim_summaries.yaml",
               "experiments/gpu/recall_agent_policies.yaml", "experiments/gpu/recall_v4_seed.yaml",
               "experiments/gpu/long_messages.yaml")


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main(args, cli: Callable[[list[str]], int]) -> int:
    """`cli` is the `dkilab` entry point (dkilab.cli.main), passed in so this module does not import it."""
    echo = print
    gpus = gpu_count()
    if not args.cpu:
        missing = cuda_missing()
        if missing:
            print(missing, file=sys.stderr)
            return 2
    device, dtype = ("cpu", "float32") if args.cpu else ("auto", "bfloat16")
    processes = 1 if args.cpu else max(1, gpus)
    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    configs = args.configs or [c for c in GPU_CONFIGS if Path(c).exists()]

    uri = tracking_uri(args.tracking_uri)
    report = Path(args.report_dir or f"reports/gpu-{time.strftime('%Y%m%d-%H%M%S')}")
    echo(f"dkilab gpu: {gpus} GPU(s), {processes} process(es) per config, {'CPU (--cpu)' if args.cpu else 'bf16'}; "
         f"tracking {uri}; report -> {report}")

    echo("1/5 preflight: configs, weights, data (nothing loads yet)")
    checked = preflight(configs, args.data_dir, parse_set(args.set), args.limit)
    for problem in checked.problems:
        echo(f"  PROBLEM {problem}")
    if checked.problems:
        print(f"dkilab gpu: {len(checked.problems)} problem(s) before anything ran; fix them and rerun",
              file=sys.stderr)
        return 1
    echo(f"  ok: {len(checked.configs)} config(s), {sum(len(c) for _, _, c in checked.configs)} cells, "
         f"every model's weights and every dataset found")
    report.mkdir(parents=True, exist_ok=True)

    smoke = []
    if not args.skip_smoke:
        echo(f"2/5 smoke stage on {device} in {dtype}")

        smoke = run_smoke(device, dtype, gpus, echo, workdir=report / "smoke")
        (report / "smoke.json").write_text(json.dumps(smoke, indent=1))
        if not all(r["ok"] for r in smoke):
            print("dkilab gpu: the smoke stage failed (report/smoke.json); nothing was run", file=sys.stderr)
            return 1
    echo("3/5 plan: throughput measured on each model")
    plan = _plan(checked, uri, processes, echo)
    (report / "plan.json").write_text(json.dumps(plan, indent=1))
    if args.plan_only:
        _index(report, plan, smoke, [])
        return 0

    echo("4/5 running the configs (a rerun resumes: finished cells are skipped, a stopped cell continues)")
    outcomes = []
    for path, cfg, _ in checked.configs:
        t = time.perf_counter()
        code = _run_config(path, uri, processes, args, cli)
        outcomes.append({"config": str(path), "experiment": cfg.name, "exit": code,
                         "minutes": round((time.perf_counter() - t) / 60, 1)})
        echo(f"  {path}: {'done' if code == 0 else f'exit {code} (failed cells are retried by the next run)'}")
    echo(f"5/5 report folder {report}")
    for o in outcomes:
        _report(o["experiment"], uri, report / o["experiment"], cli)
    _index(report, plan, smoke, outcomes)
    echo(f"dkilab gpu: report in {report / 'index.md'}")
    return 0 if all(o["exit"] == 0 for o in outcomes) else 1


def _plan(checked, uri: str, processes: int, echo) -> list[dict]:
    throughput = {}
    specs: dict[str, Any] = {}  # model spec -> its ModelSpec
    for _, _, cells in checked.configs:
        for c in cells:
            if c.needs_model:
                specs.setdefault(c.model.spec, c.model)
            if c.judge is not None and c.judge.model not in specs:
                specs[c.judge.model] = c.model.model_copy(update={"spec": c.judge.model})
    for spec, m in specs.items():
        model = load_model(spec, **m.load_kwargs())
        throughput[spec] = tp = measure(model, batch=m.batch_size)
        echo(f"  {spec}: prefill {tp.prefill_tok_s:,.0f} tok/s, decode {tp.decode_tok_s:,.1f} tok/s"
             + (f", {tp.batch_decode_tok_s:,.1f} tok/s at batch {tp.batch}" if tp.batch > 1 else ""))
    rows = build_plan(checked, throughput, uri, processes)
    echo(plan_table(rows))
    return rows


def _run_config(path, uri: str, processes: int, args, cli) -> int:
    """One config: in this process, or under `accelerate launch` with one process per GPU."""
    cmd = ["run", str(path), "--tracking-uri", uri] + [x for s in (args.set or []) for x in ("--set", s)] + (
        ["--limit", str(args.limit)] if args.limit else []) + (["--data-dir", args.data_dir] if args.data_dir else [])
    if processes > 1:
        launcher = Path(sys.executable).parent / "accelerate"
        return subprocess.run([str(launcher), "launch", "--multi_gpu", "--num_processes", str(processes),
                               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                               "-m", "dkilab.cli", *cmd]).returncode
    return cli(cmd)


def _report(experiment: str, uri: str, folder: Path, cli) -> None:
    """The experiment's table, paired differences, per-category view and plots into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, extra in (("table.md", ["--format", "markdown", "--plots", str(folder)]),
                        ("table.csv", ["--format", "csv"]), ("by_category.md",
                                                             ["--format", "markdown", "--by", "category"]),
                        ("report.json", ["--format", "json"])):
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            code = cli(["report", experiment, "--tracking-uri", uri, *extra])
        (folder / name).write_text(buf.getvalue() + (f"\n(report exited {code}: {err.getvalue().strip()})\n" if code
                                                     else ""),
                                   encoding="utf-8")


def _index(report: Path, plan: list[dict], smoke: list[dict], outcomes: list[dict]) -> None:
    lines = ["# dkilab gpu report", "", f"written {time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    if smoke:
        lines += ["## Smoke stage", "", "| check | ok | seconds | detail |", "|---|---|---|---|"]
        lines += [f"| {r['check']} | {'yes' if r['ok'] else 'NO'} | {r['seconds']} | {r['detail']} |"
                  for r in smoke] + [""]
    lines += ["## Plan", "", "| config | cells | finished before | questions | estimate |", "|---|---|---|---|---|"]
    lines += [f"| {r['config']} | {r['cells']} | {r['finished_before']} | {r['questions']} | {r['estimate']} |"
              for r in plan]
    if outcomes:
        lines += ["", "## Runs", "", "| config | exit | minutes | report |", "|---|---|---|---|"]
        lines += [f"| {o['config']} | {o['exit']} | {o['minutes']} | [{o['experiment']}]({o['experiment']}/table.md) |"
                  for o in outcomes]
    (report / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
