"""`dkilab` command line."""
from __future__ import annotations

import argparse
import sys

from dkilab import __version__


def _cmd_demo(args: argparse.Namespace) -> int:
    from dkilab.demo import run_demo

    run_demo(args.store)
    return 0


def _cmd_bench_store(args: argparse.Namespace) -> int:
    from dkilab.bench.store import main as bench_main

    return bench_main(data_dir=args.data_dir, scale=args.scale, queries=args.queries)


def _cmd_bench_strategies(args: argparse.Namespace) -> int:
    from dkilab.bench.strategies import main as bench_main

    return bench_main(data_dir=args.data_dir, questions=args.questions, model_spec=args.model,
                      max_prompt_tokens=args.max_prompt_tokens)


def _cmd_run(args: argparse.Namespace) -> int:
    import os

    from dkilab.eval.experiment import load_experiment, parse_set
    from dkilab.eval.runner import check_expectations, results_table, run_experiment, tracking_uri

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    overrides = parse_set(args.set)
    cfg = load_experiment(args.config, overrides)
    if args.limit:
        cfg = cfg.model_copy(update={"datasets": [d.model_copy(update={"question_limit": args.limit}) for d in cfg.datasets]})
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path=args.config)
    from dkilab.eval.runner import process_state

    if not process_state().is_main_process:
        return 0
    table = results_table(results)
    if not table.empty:
        print("\n" + table.to_string(float_format=lambda x: f"{x:.3f}"))
    print(f"\nMLflow: {tracking_uri(args.tracking_uri)} (experiment {cfg.name!r}); open it with `dkilab ui`")
    problems = check_expectations(cfg, results)
    for p in problems:
        print(f"EXPECTATION MISSED: {p}", file=sys.stderr)
    return 1 if problems else 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dkilab.eval.tracking import report

    table = report(args.experiment, args.tracking_uri)
    print(table.to_string(float_format=lambda x: f"{x:.3f}") if not table.empty else "(no finished cells)")
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    import subprocess

    from dkilab.eval.runner import tracking_uri

    uri = tracking_uri(args.tracking_uri)
    print(f"MLflow UI for {uri} on http://{args.host}:{args.port}")
    return subprocess.call([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                            "--host", args.host, "--port", str(args.port)])


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dkilab.eval.datasets import LOADERS, load_dataset

    if args.action == "list" or not args.name:
        for name, fn in sorted(LOADERS.items()):
            print(f"{name:12s} {(fn.__module__ and (__import__(fn.__module__, fromlist=['x']).__doc__ or '').strip().splitlines()[0])}")
        return 0
    convs = load_dataset(args.name, data_dir=args.data_dir)
    qs = [q for c in convs for q in c.questions]
    cats: dict[str, int] = {}
    for q in qs:
        cats[str(q.category)] = cats.get(str(q.category), 0) + 1
    print(f"{args.name}: {len(convs)} conversations, {sum(len(c.messages) for c in convs)} messages, "
          f"{len(qs)} questions ({sum(not q.answerable for q in qs)} unanswerable)")
    print("languages: " + ", ".join(sorted({c.language for c in convs})))
    print("categories: " + ", ".join(f"{k}={v}" for k, v in sorted(cats.items())))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dkilab", description="Conversational-memory research workbench.")
    p.add_argument("--version", action="version", version=f"dkilab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="ingest the bundled fixture conversations and run each query tool")
    demo.add_argument("--store", default=None, help="store directory (default: a throw-away store)")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    bs = bench_sub.add_parser("store", help="ingest rate and query-tool latency on LoCoMo and a 100x synthetic store")
    bs.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bs.add_argument("--scale", type=int, default=100, help="synthetic store size as a multiple of LoCoMo (default 100)")
    bs.add_argument("--queries", type=int, default=200, help="queries per tool (default 200)")
    bs.set_defaults(func=_cmd_bench_store)
    bst = bench_sub.add_parser("strategies", help="tokens, latency per stage and fact calls of every strategy on LoCoMo")
    bst.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bst.add_argument("--questions", type=int, default=20, help="LoCoMo questions (default 20)")
    bst.add_argument("--model", default="offline:smollm2", help="model spec (default offline:smollm2)")
    bst.add_argument("--max-prompt-tokens", type=int, default=4096, help="prompt cap for every strategy (default 4096)")
    bst.set_defaults(func=_cmd_bench_strategies)

    run = sub.add_parser("run", help="run an experiment YAML (strategies x sweep x datasets) into MLflow")
    run.add_argument("config", help="experiment YAML, e.g. experiments/quickstart.yaml")
    run.add_argument("--limit", type=int, default=None, help="questions per conversation")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a dotted config key (repeatable)")
    run.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    run.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or "
                                                           "sqlite:///mlflow/mlflow.db in the project)")
    run.set_defaults(func=_cmd_run)
    rep = sub.add_parser("report", help="comparison table of an experiment's finished cells, from MLflow")
    rep.add_argument("experiment", help="experiment name (the YAML's `name`)")
    rep.add_argument("--tracking-uri", default=None)
    rep.set_defaults(func=_cmd_report)
    ui = sub.add_parser("ui", help="the MLflow UI on the default tracking store")
    ui.add_argument("--tracking-uri", default=None)
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=_cmd_ui)
    ds = sub.add_parser("datasets", help="list the dataset loaders or describe one dataset")
    ds.add_argument("action", choices=["list", "show"])
    ds.add_argument("name", nargs="?")
    ds.add_argument("--data-dir", default=None)
    ds.set_defaults(func=_cmd_datasets)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
