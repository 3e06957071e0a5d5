"""`dkilab run | rescore | report | ui | gpu`: experiments, their results and the GPU comparison."""
from __future__ import annotations

import argparse
import sys

from dkilab.cli.common import non_negative_float, non_negative_int, positive_int


def _cmd_run(args: argparse.Namespace) -> int:
    import os

    from dkilab.eval.harness.experiment import load_experiment, parse_set, with_question_limit
    from dkilab.eval.harness.runner import process_state, run_experiment

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    cfg = load_experiment(args.config, parse_set(args.set), budgets=not args.budgets)
    if args.limit is not None:
        cfg = with_question_limit(cfg, args.limit)
    if args.budgets:
        from dkilab.eval.harness.budgets import table
        from dkilab.eval.harness.experiment import check_config

        print(table(check_config(cfg, args.config, budgets=False)))
        return 0
    ray_only = [flag for flag, value in (("--ray-address", args.ray_address), ("--retries", args.retries),
                                         ("--gpus-per-cell", args.gpus_per_cell)) if value is not None]
    if ray_only and args.executor != "ray":  # they would be ignored
        print(f"dkilab run: {', '.join(ray_only)} only with --executor ray", file=sys.stderr)
        return 2
    if args.executor == "ray":
        if args.claim:
            print("dkilab run: --executor ray claims each cell itself; drop --claim", file=sys.stderr)
            return 2
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            print("dkilab run: --executor ray needs Ray: pip install 'dkilab[ray]'", file=sys.stderr)
            return 2
        from dkilab.eval.harness.ray_executor import reachable, run_on_ray

        if (why := reachable(args.ray_address)) is not None:
            print(f"dkilab run: --ray-address {args.ray_address}: {why}", file=sys.stderr)
            return 2
        cfg, results = run_on_ray(args.config, args.set, args.limit, args.data_dir, args.tracking_uri,
                                  args.ray_address, 3 if args.retries is None else args.retries, args.gpus_per_cell)
        return _print_results(cfg, results, args.tracking_uri)
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path=args.config,
                             claim=args.claim)
    if not process_state().is_main_process:
        return 0
    return _print_results(cfg, results, args.tracking_uri)


def _cmd_rescore(args: argparse.Namespace) -> int:
    import os

    from dkilab.eval.harness.rescore import stored_config
    from dkilab.eval.harness.runner import run_experiment

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    cfg, source = stored_config(args.experiment, args.tracking_uri)
    print(f"re-scoring the stored answers of {cfg.name!r} ({source}); no model under test is loaded")
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path=source, rescore=True)
    return _print_results(cfg, results, args.tracking_uri, args.metrics.split(",") if args.metrics else None)


def _print_results(cfg, results, uri: str | None, metrics: list[str] | None = None) -> int:
    """The table of a run (or re-scoring), the detector notes, where MLflow is; 1 if a cell failed or an
    expectation was missed."""
    from dkilab.eval.harness.notes import check_expectations
    from dkilab.eval.tracking.store_uri import tracking_uri
    from dkilab.eval.views.tables import INTERVAL_NOTE, format_table, results_table

    table = results_table(results, intervals=True)
    if not table.empty and metrics:
        cols = _report_columns(table, metrics)
        table = table[[c for c in table.columns if c in cols or c.removesuffix("_low").removesuffix("_high") in cols]]
    if not table.empty:
        print("\n" + format_table(table) + f"\n({INTERVAL_NOTE})")
        if "hallucination_rate" in table.columns:
            from dkilab.eval.tracking.runs import flatten
            from dkilab.eval.views.report import detector_notes

            for note in detector_notes([flatten(r.cell.resolved) for r in results if not r.error]):
                print(note)
    print(f"\nMLflow: {tracking_uri(uri)} (experiment {cfg.name!r}); {_open_hint(uri, cfg.name)}")
    problems = check_expectations(cfg, results)
    for p in problems:
        print(f"EXPECTATION MISSED: {p}" if "cell failed" not in p else f"FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


def _report_columns(table, metrics: list[str] | None) -> list[str]:
    """`--metrics` as given, else the narrow default: the headline metric, the few that decide between
    strategies (declared `narrow`: metrics/base.py), and the question count."""
    from dkilab.eval.scoring.base import headline_metrics

    if metrics:
        unknown = [m for m in metrics if m not in table.columns]
        if unknown:
            import difflib

            from dkilab.config import ConfigError
            from dkilab.eval.scoring import METRICS

            has = ", ".join(c for c in table.columns if not c.endswith(("_low", "_high")))
            absent = [m for m in unknown if m in METRICS]
            if absent:  # a real metric with no value here: say why instead of "no such metric"
                why = []
                for m in absent:
                    decl = METRICS[m]
                    what = f" ({decl.description})" if decl.description else ""
                    why.append(f"{m!r}{what} has no value in any cell: none of their questions is one it applies to "
                               "(a --questions-per-conversation run may draw none; a context-only cell has no answers "
                               "to score)")
                raise ConfigError("--metrics: " + "; ".join(why) + f". This experiment has: {has}")
            hints = [f"{m!r}" + (f" (did you mean {c[0]!r}?)" if (c := difflib.get_close_matches(m, table.columns, 1))
                                 else "")
                     for m in unknown]
            raise ConfigError(f"--metrics: no such metric in this experiment: {', '.join(hints)}; it has: {has}")
        return metrics
    from dkilab.eval.scoring.judge_stress import JUDGE_COLUMNS

    cols = headline_metrics(table.columns, counts=())
    judged = [m for m in JUDGE_COLUMNS if m in table.columns]  # a judged cell: its judge's score and errors beside
    return [*cols, *judged, *(["questions"] if "questions" in table.columns else [])]


def _markdown(frame) -> str:
    cols = [frame.index.name or "", *frame.columns] if frame.index.name else list(frame.columns)
    rows = [[str(i), *map(str, r)] for i, r in zip(frame.index, frame.values.tolist())] if frame.index.name else \
        [list(map(str, r)) for r in frame.values.tolist()]
    return "\n".join(["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols),
                      *("| " + " | ".join(r) + " |" for r in rows)])


def _cmd_report(args: argparse.Namespace) -> int:
    import json

    from dkilab.eval.views.report import report, run_rows
    from dkilab.eval.views.tables import INTERVAL_NOTE, category_table, fmt_interval, format_table, with_pm

    if args.card:
        from dkilab.eval.views.card import markdown
        from dkilab.eval.views.report import methodology

        card = methodology(args.experiment, args.tracking_uri)
        print(json.dumps(card, ensure_ascii=False, indent=1) if args.format == "json" else markdown(card))
        return 0
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    table, pairs, notes = report(args.experiment, args.tracking_uri, by_category=args.by == "category", metrics=metrics,
                                 allow_scripted=args.allow_scripted)
    if table.empty:
        print("(no finished cells)" if args.format == "text" else "")
        return 0
    if args.plots:
        _save_plots(args, table)
    cols = _report_columns(table, metrics)
    narrow = table[[c for m in cols for c in (m, f"{m}_low", f"{m}_high") if c in table.columns]]
    cats = None
    if args.by == "category":
        runs = _report_runs(args)
        cats = category_table([(name, run_rows(rid)) for name, rid in runs],
                              metrics or [c for c in cols if c != "questions"])
    if args.format == "csv":
        print(narrow.to_csv(), end="")
        for extra, title in ((cats, "by category"), (pairs, "paired differences")):
            if extra is not None and not extra.empty:
                print(f"\n# {title}\n" + extra.to_csv(index=False), end="")
        return 0
    if args.format == "json":
        out = {"cells": json.loads(narrow.reset_index().to_json(orient="records")),
               "paired": json.loads(pairs.to_json(orient="records")) if not pairs.empty else [],
               "notes": notes}
        if cats is not None:
            out["by_category"] = json.loads(cats.to_json(orient="records"))
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return 0
    text = _markdown(with_pm(narrow)) if args.format == "markdown" else format_table(narrow)
    print(text + f"\n({INTERVAL_NOTE}; over questions, or whole conversations when there are 5 or more)")
    if cats is not None and not cats.empty:
        shown = cats.copy()
        shown["value"] = [fmt_interval(v, lo, h) if lo is not None and lo == lo and h == h else f"{v:.3f}"
                          for v, lo, h in zip(cats["value"], cats["low"], cats["high"])]
        shown = shown.pivot_table(index=["cell", "category"], columns="metric", values="value", aggfunc="first",
                                  sort=False)
        shown["n"] = cats.groupby(["cell", "category"], sort=False)["n"].first()
        print("\nby category:")
        print(_markdown(shown.reset_index().set_index("cell")) if args.format == "markdown" else shown.to_string())
    if not pairs.empty:
        shown = pairs.copy()
        for c in ("a_value", "b_value", "diff", "low", "high", "p"):
            shown[c] = shown[c].map(lambda x: f"{x:.3f}")
        print("\npaired differences b - a on the same questions (95% CI; real = the interval excludes 0):")
        print(_markdown(shown.set_index("dataset")) if args.format == "markdown" else shown.to_string(index=False))
    if not metrics and "score" in table.columns and "hallucination_rate" not in table.columns:
        print("\nnote: no hallucination_rate: none of these cells' questions is unanswerable (a "
              "--questions-per-conversation run may draw none); run more questions per conversation to measure it")
    for note in notes:  # how far to trust hallucination_rate
        print("\n" + note)
    return 0


def _save_plots(args, table) -> None:
    """`--plots DIR`: the parent run's comparison plots, drawn from what the store holds."""
    from pathlib import Path

    from dkilab.notebook import load_predictions, plot_categories, plot_headlines

    out = Path(args.plots)
    out.mkdir(parents=True, exist_ok=True)
    preds = load_predictions(args.experiment, args.tracking_uri)
    figs = {"comparison.png": plot_headlines(table, args.experiment, predictions=preds)}
    if "category" in preds and preds["category"].nunique() > 1:
        from dkilab.eval.scoring import primary_metric

        figs["comparison_by_category.png"] = plot_categories(preds, primary_metric(table.columns) or "score")
    for name, fig in figs.items():
        if fig is not None:
            fig.savefig(out / name, dpi=120)
            print(f"wrote {out / name}", file=sys.stderr)


def _report_runs(args) -> list[tuple[str, str]]:
    """(cell label, run id) of the finished cells, in config order."""
    import mlflow

    from dkilab.eval.tracking import runstate
    from dkilab.eval.views.report import config_ordered

    exp = mlflow.get_experiment_by_name(args.experiment)
    if exp is None:
        return []
    runs = config_ordered(runstate.finished_runs(exp.experiment_id).values())
    return [(r.info.run_name, r.info.run_id) for r in runs]


def _open_hint(given: str | None, experiment: str) -> str:
    """How to read back and open what a run wrote, for the store it used."""
    from dkilab.eval.tracking.store_uri import DEFAULT_TRACKING_URI, tracking_uri

    uri = tracking_uri(given)
    flag = "" if uri == DEFAULT_TRACKING_URI or (not given and uri) else f" --tracking-uri {uri}"
    opener = f"open {uri} in a browser" if uri.startswith(("http://",
                                                           "https://")) else f"open it with `dkilab ui{flag}`"
    return f"paired differences: `dkilab report {experiment}{flag}`; {opener}"


def _cmd_ui(args: argparse.Namespace) -> int:
    from dkilab.eval.tracking.store_uri import tracking_uri
    from dkilab.eval.views.report import existing_store

    uri = tracking_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):  # a server already serves its own UI
        existing_store(uri)
        print(f"{uri} is a tracking server: its UI is at {uri} (open it in a browser)")
        return 0
    existing_store(uri)
    from dkilab.cache import cache_dir
    from dkilab.eval.tracking.ui import serve

    return serve(uri, args.host, args.port, cache_dir() / "logs" / f"mlflow-ui-{args.port}.log",
                 echo=lambda *a, **k: print(*a, **k))


def _cmd_gpu(args: argparse.Namespace) -> int:
    if args.smoke_only:  # the bare-node bundle: torch, transformers, accelerate and `make wheelhouse`
        import time

        from dkilab.gpu.bundle import main as bundle

        out = args.report_dir or f"reports/smoke-{time.strftime('%Y%m%d-%H%M%S')}"
        return bundle(["--out", out, *(["--cpu"] if args.cpu else [])])
    from dkilab.cli import main
    from dkilab.gpu.command import main as gpu_main

    return gpu_main(args, cli=main)


def add(sub) -> None:
    """Its commands' parsers, with their arguments."""
    gpu = sub.add_parser("gpu",
                         help="the GPU comparison in one command: checks, smoke stage, plan, runs, report folder",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n  dkilab gpu                     (experiments/gpu/*, every GPU, resumable)\n"
                             "  dkilab gpu --plan-only\n  dkilab gpu --smoke-only --report-dir /tmp/smoke\n"
                             "  dkilab gpu --cpu experiments/ci/gpu_path.yaml --report-dir "
                             "/tmp/r"))
    gpu.add_argument("configs", nargs="*",
                     help="experiment YAMLs (default: the comparison configs of experiments/gpu/)")
    gpu.add_argument("--cpu", action="store_true", help="run every stage on the CPU in fp32 (CI; no CUDA needed)")
    gpu.add_argument("--plan-only", action="store_true", help="stop after the plan: nothing is run")
    gpu.add_argument("--smoke-only", action="store_true",
                     help="only the smoke checks on tiny random-weight models (smoke.json, smoke.md in --report-dir); "
                          "needs torch, transformers, accelerate and `make wheelhouse`'s wheels, no network")
    gpu.add_argument("--skip-smoke", action="store_true",
                     help="skip the smoke stage (it passed on this machine before)")
    gpu.add_argument("--report-dir", default=None, help="where the report folder goes (default reports/gpu-<time>)")
    gpu.add_argument("--questions-per-conversation", "--limit", dest="limit", type=positive_int, default=None,
                     help="N questions of each conversation, drawn across every kind of question, a smoke run (--limit "
                          "is the old name)")
    gpu.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a dotted config key (repeatable)")
    gpu.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    gpu.add_argument("--tracking-uri", default=None)
    gpu.set_defaults(func=_cmd_gpu)

    run = sub.add_parser("run", help="run an experiment YAML (strategies x sweep x datasets) into MLflow",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab run experiments/quickstart.yaml\n  dkilab run "
                                "experiments/sweep_threshold_budget_locomo.yaml --questions-per-conversation 5 "
                                "--data-dir ../shared/datasets\n  dkilab run experiments/quickstart.yaml --set "
                                "defaults.max_new_tokens=16 --tracking-uri http://127.0.0.1:5000\n  accelerate launch "
                                "--num_processes 2 -m dkilab.cli run experiments/quickstart.yaml")
    run.add_argument("config", help="experiment YAML, e.g. experiments/quickstart.yaml")
    run.add_argument("--questions-per-conversation", "--limit", dest="limit", type=positive_int, default=None,
                     help="N (>= 1) questions of each conversation, drawn round-robin over the kinds of question "
                          "(answerable or not x category) (--limit is the old name); the YAML's "
                          "dataset `limit` counts conversations")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a dotted config key (repeatable)")
    run.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    run.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or "
                                                           "sqlite:///mlflow/mlflow.db in the project)")
    run.add_argument("--budgets", action="store_true",
                     help="print every cell's resolved token budget (window, matched history, fact room, reserves) "
                          "and stop: nothing is run")
    run.add_argument("--claim", action="store_true",
                     help="run only the cells this process claims in the tracking store (several machines, e.g. a "
                          "Slurm array, running the same config share its cells; experiments/gpu/README.md)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="ray: each cell a Ray task with its GPU request and retries, into the same tracking store "
                          "(pip install 'dkilab[ray]'; dkilab.eval.harness.ray_executor)")
    run.add_argument("--ray-address", default=None,
                     help="the Ray cluster (default: $RAY_ADDRESS, else a cluster started on this machine)")
    run.add_argument("--retries", type=non_negative_int, default=None,
                     help="--executor ray: times a cell's task is retried (default 3)")
    run.add_argument("--gpus-per-cell", type=non_negative_float, default=None,
                     help="--executor ray: GPUs each cell requests (default 1 for a local model when the cluster has "
                          "GPUs, else 0)")
    run.set_defaults(func=_cmd_run)

    rsc = sub.add_parser("rescore",
                         help="score an experiment's stored answers again with today's metrics (no generation)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n  dkilab rescore quickstart\n"
                             "  dkilab rescore experiments/quickstart.yaml --metrics score,hallucination_rate\n\n"
                             "Every cell's answers are stored with its run (answers.jsonl.gz); each cell is scored "
                             "again into a new run\nand the line per cell says which metrics changed. `dkilab run` "
                             "does the same by itself for cells\nwhose metrics, scorer or judge changed but whose "
                             "generation did not."))
    rsc.add_argument("experiment", help="experiment name (its config is read from its newest run) or experiment YAML")
    rsc.add_argument("--metrics", default=None, help="comma-separated metrics to show (all are computed and logged)")
    rsc.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR): the questions "
                                                      "and gold answers are read again")
    rsc.add_argument("--tracking-uri", default=None)
    rsc.set_defaults(func=_cmd_rescore)

    rep = sub.add_parser("report", help="comparison table of an experiment's finished cells, from MLflow",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n  dkilab report quickstart\n"
                             "  dkilab report quickstart --by category --metrics score,hallucination_rate\n"
                             "  dkilab report ci-session-flow --format markdown --plots plots/\n"
                             "  dkilab report sweep --format json --tracking-uri http://127.0.0.1:5000\n"
                             "  dkilab report quickstart --card"))
    rep.add_argument("experiment", help="experiment name (the YAML's `name`)")
    rep.add_argument("--tracking-uri", default=None)
    rep.add_argument("--by", choices=["none", "category"], default="none",
                     help="also per category: the metrics with intervals and the paired differences")
    rep.add_argument("--metrics", default=None, help="comma-separated metrics to show and compare pairwise (default: "
                                                     "the headline metric, hallucination, unsupported claims, prompt "
                                                     "tokens, latency)")
    rep.add_argument("--format", choices=["text", "markdown", "csv", "json"], default="text", help="output format")
    rep.add_argument("--plots", metavar="DIR", default=None,
                     help="also write comparison.png and comparison_by_category.png (the parent run's plots) to DIR")
    rep.add_argument("--card", action="store_true", help="the methodology card of the experiment's latest run instead "
                     "(models and prompt digests, data, budgets, calls and tokens per question, hardware, version; "
                     "--format json for all of it)")
    rep.add_argument("--allow-scripted", action="store_true",
                     help="report cells that ran on a scripted: model (pipeline tests; refused by default)")
    rep.set_defaults(func=_cmd_report)

    ui = sub.add_parser("ui", help="the MLflow UI on a tracking store (default: the project's)",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                            "examples:\n  dkilab ui\n  dkilab ui --tracking-uri sqlite:////tmp/sweep/mlflow.db --port "
                            "5001\n  dkilab ui --tracking-uri http://127.0.0.1:5000   (prints the server's own UI "
                            "address)"))
    ui.add_argument("--tracking-uri", default=None)
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=_cmd_ui)
