"""`dkilab` command line."""
from __future__ import annotations

import argparse
import sys

from dkilab import __version__


def _cmd_demo(args: argparse.Namespace) -> int:
    from dkilab.demo import run_demo

    run_demo(args.store)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from dkilab.service.server import serve

    serve(args.store, args.keys, args.host, args.port)
    return 0


def _cmd_tracking_server(args: argparse.Namespace) -> int:
    from dkilab.eval.team_server import main as server_main

    return server_main(args.dir, args.port, args.pg_port, args.host, args.backend_store_uri, args.workers)


def _cmd_keys(args: argparse.Namespace) -> int:
    from dkilab.config import ConfigError
    from dkilab.service.keys import add_key, read_keys, revoke_keys

    try:
        if args.action == "add":
            if not args.user:
                raise SystemExit("dkilab keys add: give the user id the key belongs to")
            key = add_key(args.keys, args.user, args.note)
            print(f"new key for {args.user} (shown once; {args.keys} keeps only its hash):\n{key}")
        elif args.action == "revoke":
            gone = revoke_keys(args.keys, args.user, args.hash)
            print(f"revoked {len(gone)} key(s): " + ", ".join(f"{e.user_id} sha256 {e.sha256[:12]}..." for e in gone)
                  + " (a running service refuses them from its next request)")
        else:
            for e in read_keys(args.keys).keys:
                print(f"{e.user_id:24s} sha256 {e.sha256[:12]}...  {e.note}")
    except ValueError as exc:  # a bad user id or nothing to revoke: a user error, one line
        raise ConfigError(f"dkilab keys {args.action}: {exc}") from None
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    from dkilab.eval.datasets import load_dataset
    from dkilab.eval.stores import store_for
    from dkilab.memory import Embedder

    from dkilab.eval.datasets import dataset_info
    from dkilab.eval.experiment import EmbedderSpec

    convs = load_dataset(args.dataset, data_dir=args.data_dir, limit=args.limit)
    spec = EmbedderSpec(model=args.embedder or "auto").for_language(dataset_info(args.dataset)["language"])
    store = store_for(convs, args.dataset, Embedder(spec.model), path=args.store)
    users = len({c.user_id for c in convs})
    print(f"{args.store}: {store.count()} messages of {users} users from {args.dataset}")
    store.close()
    return 0


def _cmd_bench_serve(args: argparse.Namespace) -> int:
    from dkilab.bench.serve import main as bench_main

    return bench_main(data_dir=args.data_dir, clients=tuple(int(x) for x in args.clients.split(",")),
                      seconds=args.seconds, endpoints=tuple(e.strip() for e in args.endpoints.split(",") if e.strip()),
                      flood_clients=args.flood_clients)


def _cmd_bench_store(args: argparse.Namespace) -> int:
    from dkilab.bench.store import main as bench_main

    return bench_main(data_dir=args.data_dir, scale=args.scale, queries=args.queries,
                      parts=[p.strip() for p in args.parts.split(",") if p.strip()], writers=args.writers,
                      writer_messages=args.writer_messages, readers=args.readers, open_users=args.open_users)


def _cmd_bench_strategies(args: argparse.Namespace) -> int:
    from dkilab.bench.strategies import main as bench_main

    return bench_main(data_dir=args.data_dir, questions=args.questions, model_spec=args.model,
                      max_prompt_tokens=args.max_prompt_tokens)


def _cmd_bench_embedders(args: argparse.Namespace) -> int:
    from dkilab.bench.embedders import main as bench_main

    return bench_main(data_dir=args.data_dir, messages=args.messages, queries=args.queries)


def _cmd_bench_retrieval(args: argparse.Namespace) -> int:
    train_only = [flag for flag, on in (("--out", args.out), ("--with-previous-turn", args.with_previous_turn),
                                        ("--english-e5-part", args.english_e5_part),
                                        ("--no-cue-parts", args.no_cue_parts), ("--english", args.english)) if on]
    if train_only and not args.train:  # a model would not be fitted: say so rather than run the bench
        raise SystemExit(f"dkilab bench retrieval: {', '.join(train_only)} only with --train (fitting the fusion model)")
    if args.train and args.peers:
        raise SystemExit("dkilab bench retrieval: --peers runs the bench, --train fits the model: give one")
    if args.train:
        from pathlib import Path

        from dkilab.bench.fusion_train import train

        train(data_dir=args.data_dir, out=Path(args.out) if args.out else None,
              with_previous_turn=True if args.with_previous_turn else None, english_e5=args.english_e5_part,
              cue_parts=not args.no_cue_parts, english=args.english)
        return 0
    from dkilab.bench.retrieval import main as bench_main

    return bench_main(data_dir=args.data_dir, metric=args.metric, tracking_uri=args.tracking_uri, peers=args.peers)


def _cmd_bench_generation(args: argparse.Namespace) -> int:
    from dkilab.bench.generation import main as bench_main

    sizes = tuple(int(x) for x in args.batch_sizes.split(","))
    return bench_main(model_spec=args.model, prompts=args.prompts, new_tokens=args.new_tokens, batch_sizes=sizes)


def _cmd_bench_gpu(args: argparse.Namespace) -> int:
    from dkilab.bench.gpu import main as bench_main

    return bench_main(args)


def _cmd_bench_agents(args: argparse.Namespace) -> int:
    from dkilab.bench.agents import main as bench_main

    return bench_main(data_dir=args.data_dir, questions=args.questions, repeat=args.repeat)


def _cmd_bench_abstention(args: argparse.Namespace) -> int:
    import os

    from dkilab.bench.abstention import main as bench_main

    if args.label_sheet:
        from dkilab.bench.abstention_external import label_sheet

        where = args.data_dir or os.environ.get("DKILAB_DATA_DIR")
        if not where:
            print("dkilab: error: --label-sheet reads KdConv and LoCoMo from the data dir (--data-dir or "
                  "$DKILAB_DATA_DIR)", file=sys.stderr)
            return 2
        try:
            n = label_sheet(where, args.label_sheet)
        except ValueError as exc:
            print(f"dkilab: error: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {n} replies to label to {args.label_sheet} (fill each \"label\" with abstain, answer, pivot "
              f"or other, reading the question first; then: dkilab bench abstention --second-reader {args.label_sheet})")
        return 0
    return bench_main(split=args.split, judge=args.judge, show_errors=args.errors, train=args.train,
                      judge_per_source=args.judge_per_source, external=args.external, data_dir=args.data_dir,
                      second_reader=args.second_reader)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _cmd_gpu(args: argparse.Namespace) -> int:
    from dkilab.gpu.command import main as gpu_main

    return gpu_main(args, cli=main)


def _cmd_run(args: argparse.Namespace) -> int:
    import os

    from dkilab.eval.experiment import load_experiment, parse_set, with_question_limit
    from dkilab.eval.runner import process_state, run_experiment

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    cfg = load_experiment(args.config, parse_set(args.set), budgets=not args.budgets)
    if args.limit is not None:
        cfg = with_question_limit(cfg, args.limit)
    if args.budgets:
        from dkilab.eval.budgets import table
        from dkilab.eval.experiment import check_config

        print(table(check_config(cfg, args.config, budgets=False)))
        return 0
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path=args.config,
                             claim=args.claim)
    if not process_state().is_main_process:
        return 0
    return _print_results(cfg, results, args.tracking_uri)


def _cmd_rescore(args: argparse.Namespace) -> int:
    import os

    from dkilab.eval.rescore import stored_config
    from dkilab.eval.runner import run_experiment

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    cfg, source = stored_config(args.experiment, args.tracking_uri)
    print(f"re-scoring the stored answers of {cfg.name!r} ({source}); no model under test is loaded")
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path=source, rescore=True)
    return _print_results(cfg, results, args.tracking_uri, args.metrics.split(",") if args.metrics else None)


def _print_results(cfg, results, uri: str | None, metrics: list[str] | None = None) -> int:
    """The table of a run (or re-scoring), the detector notes, where MLflow is; 1 if a cell failed or an
    expectation was missed."""
    from dkilab.eval.report import tracking_uri
    from dkilab.eval.runner import check_expectations
    from dkilab.eval.tables import INTERVAL_NOTE, format_table, results_table

    table = results_table(results, intervals=True)
    if not table.empty and metrics:
        cols = _report_columns(table, metrics)
        table = table[[c for c in table.columns if c in cols or c.removesuffix("_low").removesuffix("_high") in cols]]
    if not table.empty:
        print("\n" + format_table(table) + f"\n({INTERVAL_NOTE})")
        if "hallucination_rate" in table.columns:
            from dkilab.eval.report import detector_notes
            from dkilab.eval.tracking import flatten

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
    from dkilab.eval.metrics.base import headline_metrics

    if metrics:
        unknown = [m for m in metrics if m not in table.columns]
        if unknown:
            import difflib

            from dkilab.config import ConfigError
            from dkilab.registry import METRICS

            has = ", ".join(c for c in table.columns if not c.endswith(("_low", "_high")))
            absent = [m for m in unknown if m in METRICS]
            if absent:  # a real metric with no value here: say why instead of "no such metric"
                why = []
                for m in absent:
                    decl = METRICS[m]
                    what = f" ({decl.description})" if decl.description else ""
                    why.append(f"{m!r}{what} has no value in any cell: none of their questions is one it applies to "
                               f"(a --questions-per-conversation run may draw none; a context-only cell has no answers to score)")
                raise ConfigError("--metrics: " + "; ".join(why) + f". This experiment has: {has}")
            hints = [f"{m!r}" + (f" (did you mean {c[0]!r}?)" if (c := difflib.get_close_matches(m, table.columns, 1)) else "")
                     for m in unknown]
            raise ConfigError(f"--metrics: no such metric in this experiment: {', '.join(hints)}; it has: {has}")
        return metrics
    return headline_metrics(table.columns, counts=("questions",))


def _markdown(frame) -> str:
    cols = [frame.index.name or "", *frame.columns] if frame.index.name else list(frame.columns)
    rows = [[str(i), *map(str, r)] for i, r in zip(frame.index, frame.values.tolist())] if frame.index.name else \
        [list(map(str, r)) for r in frame.values.tolist()]
    return "\n".join(["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols),
                      *("| " + " | ".join(r) + " |" for r in rows)])


def _cmd_report(args: argparse.Namespace) -> int:
    import json

    from dkilab.eval.report import report, run_rows
    from dkilab.eval.tables import INTERVAL_NOTE, category_table, fmt_interval, format_table, with_pm

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
        cats = category_table([(name, run_rows(rid)) for name, rid in runs], metrics or [c for c in cols if c != "questions"])
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
        shown = shown.pivot_table(index=["cell", "category"], columns="metric", values="value", aggfunc="first", sort=False)
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
        print("\nnote: no hallucination_rate: none of these cells' questions is unanswerable (a --questions-per-conversation run may "
              "draw none); run more questions per conversation to measure it")
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
        from dkilab.eval.metrics import primary_metric

        figs["comparison_by_category.png"] = plot_categories(preds, primary_metric(table.columns) or "score")
    for name, fig in figs.items():
        if fig is not None:
            fig.savefig(out / name, dpi=120)
            print(f"wrote {out / name}", file=sys.stderr)


def _report_runs(args) -> list[tuple[str, str]]:
    """(cell label, run id) of the finished cells, in config order."""
    import mlflow

    from dkilab.eval import runstate
    from dkilab.eval.report import config_ordered

    exp = mlflow.get_experiment_by_name(args.experiment)
    if exp is None:
        return []
    runs = config_ordered(runstate.finished_runs(exp.experiment_id).values())
    return [(r.info.run_name, r.info.run_id) for r in runs]


def _open_hint(given: str | None, experiment: str) -> str:
    """How to read back and open what a run wrote, for the store it used."""
    from dkilab.eval.report import DEFAULT_TRACKING_URI, tracking_uri

    uri = tracking_uri(given)
    flag = "" if uri == DEFAULT_TRACKING_URI or (not given and uri) else f" --tracking-uri {uri}"
    opener = f"open {uri} in a browser" if uri.startswith(("http://", "https://")) else f"open it with `dkilab ui{flag}`"
    return f"paired differences: `dkilab report {experiment}{flag}`; {opener}"


def _cmd_ui(args: argparse.Namespace) -> int:
    from dkilab.eval.report import existing_store, tracking_uri

    uri = tracking_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):  # a server already serves its own UI
        existing_store(uri)
        print(f"{uri} is a tracking server: its UI is at {uri} (open it in a browser)")
        return 0
    existing_store(uri)
    from dkilab.cache import cache_dir
    from dkilab.eval.ui import serve

    return serve(uri, args.host, args.port, cache_dir() / "logs" / f"mlflow-ui-{args.port}.log",
                 echo=lambda *a, **k: print(*a, **k))


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dkilab.eval.datasets import DATASETS, dataset_available, load_dataset

    if args.action == "list" or not args.name:
        import os

        where = args.data_dir or os.environ.get("DKILAB_DATA_DIR")
        print(f"data dir: {where} ({'--data-dir' if args.data_dir else '$DKILAB_DATA_DIR'})" if where else
              "data dir: not set (--data-dir or $DKILAB_DATA_DIR); only the bundled fixtures are present")
        import pandas as pd

        iso = {"cn": "zh"}  # the loaders' internal code for Chinese; ISO 639-1 says zh
        rows = [{"dataset": name, "language": iso.get(meta["language"], meta["language"]), "scorer": meta["scorer"],
                 "version": f"v{meta['version']}",
                 "here": "present" if dataset_available(name, args.data_dir) else "not in the data dir",
                 "description": meta["description"]} for name, meta in ((n, DATASETS.meta(n)) for n in DATASETS.names())]
        frame = pd.DataFrame(rows)
        table = frame.to_string(index=False, justify="left",
                                formatters={c: (lambda w: lambda v: f"{v:<{w}}")(int(frame[c].str.len().max()))
                                            for c in frame.columns})
        print("\n".join(line.rstrip() for line in table.splitlines()))
        return 0
    convs = load_dataset(args.name, data_dir=args.data_dir)
    qs = [q for c in convs for q in c.questions]
    cats: dict[str, int] = {}
    for q in qs:
        cats[str(q.category)] = cats.get(str(q.category), 0) + 1
    print(f"{args.name}: {len(convs)} conversations, {sum(len(c.messages) for c in convs)} messages, "
          f"{len(qs)} questions ({sum(not q.answerable for q in qs)} unanswerable)")
    print("languages: " + ", ".join(sorted({"zh" if c.language == "cn" else c.language for c in convs})))
    print("categories: " + ", ".join(f"{k}={v}" for k, v in sorted(cats.items())))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dkilab", description="Conversational-memory research workbench.")
    p.add_argument("--version", action="version", version=f"dkilab {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of a user error (config, data, model)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="ingest the bundled fixture conversations and run each query tool",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab demo\n  dkilab demo --store stores/demo")
    demo.add_argument("--store", default=None, help="store directory (default: a throw-away store)")
    demo.set_defaults(func=_cmd_demo)

    ing = sub.add_parser("ingest", help="build (or top up) a memory store from a dataset",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab ingest fixtures --store stores/fixtures\n"
                                "  dkilab ingest locomo --store stores/locomo --data-dir ../shared/datasets")
    ing.add_argument("dataset", help="a registered dataset (dkilab datasets list)")
    ing.add_argument("--store", required=True, help="store directory (created if missing; idempotent)")
    ing.add_argument("--conversations", "--limit", dest="limit", type=int, default=None,
                     help="the first N conversations (--limit is the old name)")
    ing.add_argument("--embedder", default=None, help="encoder (default: the dataset language's, as `embedder: auto`)")
    ing.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    ing.set_defaults(func=_cmd_ingest)

    srv = sub.add_parser("serve", help="the recall service: user-bound query tools over HTTP (FastAPI)",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab keys add alice --keys keys.yaml\n"
                                "  dkilab serve --store stores/fixtures --keys keys.yaml --port 8765\n"
                                "  curl -s -H 'X-API-Key: dk_...' -d '{\"query_text\": \"cat\"}' "
                                "http://127.0.0.1:8765/v1/lexical_search")
    srv.add_argument("--store", required=True, help="store directory (dkilab ingest builds one)")
    srv.add_argument("--keys", required=True, help="keys file: user ids and key hashes (dkilab keys add)")
    srv.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    srv.add_argument("--port", type=int, default=8765)
    srv.set_defaults(func=_cmd_serve)

    ts = sub.add_parser("tracking-server", help="the team's MLflow server on PostgreSQL, artifacts served by it",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog="examples:\n  dkilab tracking-server                      # mlflow/team, port 5000\n"
                               "  dkilab tracking-server --host 0.0.0.0 --port 5000   # reachable by the team\n"
                               "  MLFLOW_TRACKING_URI=http://HOST:5000 dkilab run experiments/quickstart.yaml")
    ts.add_argument("--dir", default="mlflow/team", help="Postgres data, artifacts and logs (default mlflow/team)")
    ts.add_argument("--port", type=int, default=5000, help="MLflow server port (default 5000)")
    ts.add_argument("--pg-port", type=int, default=5433, help="Postgres port, loopback only (default 5433)")
    ts.add_argument("--host", default="127.0.0.1", help="MLflow bind address (default loopback; 0.0.0.0 for a team)")
    ts.add_argument("--backend-store-uri", default=None, metavar="URI",
                    help="an external PostgreSQL (postgresql://user:pw@host/db): no local one is started")
    ts.add_argument("--workers", type=_positive_int, default=2, help="MLflow server worker processes (default 2)")
    ts.set_defaults(func=_cmd_tracking_server)

    keys = sub.add_parser("keys", help="API keys of the recall service (the file keeps hashes only)",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n  dkilab keys add alice --keys keys.yaml --note laptop\n  dkilab keys list --keys keys.yaml\n"
                                "  dkilab keys revoke alice --keys keys.yaml\n  dkilab keys revoke --hash 3f1c0a9b --keys keys.yaml")
    keys.add_argument("action", choices=["add", "list", "revoke"])
    keys.add_argument("user", nargs="?", help="add: the user id the new key is bound to; revoke: every key of this user")
    keys.add_argument("--hash", default=None, help="revoke: the one key whose sha256 starts with this (8+ hex digits)")
    keys.add_argument("--keys", required=True, help="keys file (created by the first add)")
    keys.add_argument("--note", default="", help="add: a note kept beside the hash")
    keys.set_defaults(func=_cmd_keys)

    bench = sub.add_parser("bench", help="benchmarks that print figures",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab bench store --parts concurrency,open\n  dkilab bench serve --clients 8 --seconds 10\n  dkilab bench abstention --errors\n  dkilab bench agents --questions 50")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    bs = bench_sub.add_parser("store", help="ingest rate and query-tool latency on LoCoMo and a 100x synthetic store")
    bs.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bs.add_argument("--scale", type=int, default=100, help="synthetic store size as a multiple of LoCoMo (default 100)")
    bs.add_argument("--queries", type=int, default=200, help="queries per tool (default 200)")
    bs.add_argument("--parts", default="locomo,synthetic,concurrency,open",
                    help="comma-separated parts to run (default: locomo,synthetic,concurrency,open)")
    bs.add_argument("--writers", type=int, default=4, help="concurrency: writer processes (default 4)")
    bs.add_argument("--writer-messages", type=int, default=2000, help="concurrency: messages per writer (default 2000)")
    bs.add_argument("--readers", type=int, default=2, help="concurrency: reader threads (default 2)")
    bs.add_argument("--open-users", type=int, default=2000, help="open time: users in the store (default 2000)")
    bs.set_defaults(func=_cmd_bench_store)
    bsv = bench_sub.add_parser("serve", help="recall-service load: req/s and p50/p95/p99 per endpoint on LoCoMo")
    bsv.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bsv.add_argument("--clients", default="1,8,32", help="concurrent clients per row (default 1,8,32)")
    bsv.add_argument("--seconds", type=float, default=4.0, help="seconds per endpoint and client count (default 4)")
    bsv.add_argument("--endpoints", default="lexical_search,semantic_search,messages_list,neighbors,get")
    bsv.add_argument("--flood-clients", type=int, default=4,
                     help="isolation row: clients of one tenant making the largest calls while another tenant's get "
                          "is timed (0: skip the row)")
    bsv.set_defaults(func=_cmd_bench_serve)
    bgp = bench_sub.add_parser("gpu", help="K/V memory against memory as text: TTFT, per-token latency, sessions, "
                               "throughput (7-8B shapes on a GPU, tiny on CPU)")
    from dkilab.bench.gpu import add_arguments as gpu_arguments

    gpu_arguments(bgp)
    bgp.set_defaults(func=_cmd_bench_gpu)
    bst = bench_sub.add_parser("strategies", help="tokens, latency per stage and fact calls of every strategy on LoCoMo")
    bst.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bst.add_argument("--questions", type=int, default=20, help="LoCoMo questions (default 20)")
    bst.add_argument("--model", default="offline:smollm2", help="model spec (default offline:smollm2)")
    bst.add_argument("--max-prompt-tokens", type=int, default=4096, help="prompt cap for every strategy (default 4096)")
    bst.set_defaults(func=_cmd_bench_strategies)
    be = bench_sub.add_parser("embedders", help="encode speed of the offline sentence encoders (msgs/s, query ms)")
    be.add_argument("--data-dir", default=None)
    be.add_argument("--messages", type=int, default=1000)
    be.add_argument("--queries", type=int, default=100)
    be.set_defaults(func=_cmd_bench_embedders)
    brt = bench_sub.add_parser("retrieval", help="recall defaults (the dev-tuned pipeline) vs the previous defaults vs single signals on "
                                                 "held-back data (experiments/retrieval_bench.yaml), paired")
    brt.add_argument("--data-dir", default=None)
    brt.add_argument("--metric", default="recall_at_10")
    brt.add_argument("--peers", action="store_true",
                     help="also run engram-search and rank-bm25 on the same questions (pip install 'dkilab[peers]')")
    brt.add_argument("--tracking-uri", default=None)
    brt.add_argument("--train", action="store_true",
                     help="refit the learned fusion on the dev split only (dkilab/recall/fusion_lr.json), then stop")
    brt.add_argument("--out", default=None, help="with --train: write the model here instead")
    brt.add_argument("--with-previous-turn", action="store_true",
                     help="with --train: fit on stores that embed each turn with the one it replies to (index text v2)")
    brt.add_argument("--english-e5-part", action="store_true",
                     help="with --train: also fit a part for English questions on e5 stores (LoCoMo dev), e5:en")
    brt.add_argument("--no-cue-parts", action="store_true",
                     help="with --train: no parts for conversational cues (leave MADial-Bench dev out): the ablation model")
    brt.add_argument("--english", default=None, metavar="ENCODER",
                     help="with --train: the encoder `auto` gives English data (offline:minilm: the stock ablation models)")
    brt.set_defaults(func=_cmd_bench_retrieval)
    bgen = bench_sub.add_parser("generation", help="tokens/s of batched greedy generation at several batch sizes")
    bgen.add_argument("--model", default="offline:smollm2")
    bgen.add_argument("--prompts", type=int, default=16)
    bgen.add_argument("--new-tokens", type=int, default=24)
    bgen.add_argument("--batch-sizes", default="1,4,8,16")
    bgen.set_defaults(func=_cmd_bench_generation)
    bg = bench_sub.add_parser("agents", help="recall-agent latency on LoCoMo-sized users and pointer resolution time")
    bg.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR; else a synthetic user)")
    bg.add_argument("--questions", type=int, default=200, help="questions for the recall agent (default 200)")
    bg.add_argument("--repeat", type=int, default=20, help="passes over the pointer scenarios (default 20)")
    bg.set_defaults(func=_cmd_bench_agents)
    ba = bench_sub.add_parser("abstention", help="precision/recall of the abstention detector on the labelled phrasings")
    ba.add_argument("--split", choices=["test", "dev"], default="test", help="held-out test half (default) or dev half")
    ba.add_argument("--judge", default=None, help="also measure an LLM judge (model spec, e.g. offline:smollm2)")
    ba.add_argument("--errors", action="store_true", help="list the phrasings each detector gets wrong")
    ba.add_argument("--train", action="store_true", help="refit the hybrid detector's weights on every source first")
    ba.add_argument("--judge-per-source", type=int, default=4, help="rows per source and language the --judge model labels (default 4)")
    ba.add_argument("--external", action="store_true", help="also the check on replies written by other people (KdConv, "
                    "LoCoMo; needs the data dir): figures per part, the dev part's errors with --errors")
    ba.add_argument("--data-dir", default=None, help="dataset directory for --external (default: $DKILAB_DATA_DIR)")
    ba.add_argument("--label-sheet", default=None, metavar="OUT", help="write the external check's replies, blind, for "
                    "a second reader to label (a path outside the project: it holds dataset text), and stop")
    ba.add_argument("--second-reader", default=None, metavar="FILE", help="with the external check: another reader's "
                    "label file (a filled --label-sheet); prints the agreement and the figures under those labels")
    ba.set_defaults(func=_cmd_bench_abstention)

    gpu = sub.add_parser("gpu", help="the GPU comparison in one command: checks, smoke stage, plan, runs, report folder",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n  dkilab gpu                     (experiments/gpu/*, every GPU, resumable)\n"
                             "  dkilab gpu --plan-only\n  dkilab gpu --cpu experiments/ci/gpu_path.yaml --report-dir /tmp/r"))
    gpu.add_argument("configs", nargs="*", help="experiment YAMLs (default: the comparison configs of experiments/gpu/)")
    gpu.add_argument("--cpu", action="store_true", help="run every stage on the CPU in fp32 (CI; no CUDA needed)")
    gpu.add_argument("--plan-only", action="store_true", help="stop after the plan: nothing is run")
    gpu.add_argument("--skip-smoke", action="store_true", help="skip the smoke stage (it passed on this machine before)")
    gpu.add_argument("--report-dir", default=None, help="where the report folder goes (default reports/gpu-<time>)")
    gpu.add_argument("--questions-per-conversation", "--limit", dest="limit", type=_positive_int, default=None,
                     help="N questions of each conversation, drawn across every kind of question, a smoke run (--limit is the old name)")
    gpu.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a dotted config key (repeatable)")
    gpu.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    gpu.add_argument("--tracking-uri", default=None)
    gpu.set_defaults(func=_cmd_gpu)

    run = sub.add_parser("run", help="run an experiment YAML (strategies x sweep x datasets) into MLflow",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab run experiments/quickstart.yaml\n  dkilab run experiments/sweep_threshold_budget_locomo.yaml --questions-per-conversation 5 --data-dir ../shared/datasets\n  dkilab run experiments/quickstart.yaml --set defaults.max_new_tokens=16 --tracking-uri http://127.0.0.1:5000\n  accelerate launch --num_processes 2 -m dkilab.cli run experiments/quickstart.yaml")
    run.add_argument("config", help="experiment YAML, e.g. experiments/quickstart.yaml")
    run.add_argument("--questions-per-conversation", "--limit", dest="limit", type=_positive_int, default=None,
                     help="N (>= 1) questions of each conversation, drawn round-robin over the kinds of question (answerable "
                          "or not x category) (--limit is the old name); the YAML's "
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
    run.set_defaults(func=_cmd_run)
    rsc = sub.add_parser("rescore", help="score an experiment's stored answers again with today's metrics (no generation)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                             "examples:\n  dkilab rescore quickstart\n"
                             "  dkilab rescore experiments/quickstart.yaml --metrics score,hallucination_rate\n\n"
                             "Every cell's answers are stored with its run (answers.jsonl.gz); each cell is scored again "
                             "into a new run\nand the line per cell says which metrics changed. `dkilab run` does the "
                             "same by itself for cells\nwhose metrics, scorer or judge changed but whose generation did not."))
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
                             "  dkilab report sweep --format json --tracking-uri http://127.0.0.1:5000"))
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
    rep.add_argument("--allow-scripted", action="store_true",
                     help="report cells that ran on a scripted: model (pipeline tests; refused by default)")
    rep.set_defaults(func=_cmd_report)
    ui = sub.add_parser("ui", help="the MLflow UI on a tracking store (default: the project's)",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                            "examples:\n  dkilab ui\n  dkilab ui --tracking-uri sqlite:////tmp/sweep/mlflow.db --port 5001\n"
                            "  dkilab ui --tracking-uri http://127.0.0.1:5000   (prints the server's own UI address)"))
    ui.add_argument("--tracking-uri", default=None)
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=_cmd_ui)
    ds = sub.add_parser("datasets", help="list the dataset loaders or describe one dataset",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab datasets list --data-dir ../shared/datasets\n  dkilab datasets show session_flow")
    ds.add_argument("action", choices=["list", "show"])
    ds.add_argument("name", nargs="?")
    ds.add_argument("--data-dir", default=None)
    ds.set_defaults(func=_cmd_datasets)
    return p


def _user_errors() -> tuple[type[BaseException], ...]:
    from dkilab.config import ConfigError
    from dkilab.eval.datasets.base import DatasetNotFoundError
    from dkilab.eval.report import ScriptedRunsError, TrackingStoreError, UnknownExperimentError
    from dkilab.eval.rescore import StoredAnswersError
    from dkilab.models.loading import ModelNotAvailableError
    from dkilab.registry import UnknownNameError

    return (ConfigError, DatasetNotFoundError, ModelNotAvailableError, UnknownNameError, ScriptedRunsError,
            TrackingStoreError, UnknownExperimentError, StoredAnswersError)


# loggers whose INFO lines are noise on a console: MLflow's "Flushing the async trace logging queue ... This may
# take a while" after the summary (issue 34 item 12); warnings and errors still show
QUIET_LOGGERS = ("mlflow.tracing.export.async_export_queue",)


def main(argv: list[str] | None = None) -> int:
    import logging

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_usage(sys.stderr)
        print("dkilab: error: a command is required (dkilab --help lists them)", file=sys.stderr)
        return 2
    clean = False
    from dkilab.eval import interrupt

    try:
        with interrupt.caught():  # a Ctrl-C that Python swallows (in a weakref callback) still stops a run
            rc = args.func(args)
            interrupt.check()  # one swallowed after the runner's last check: the command still reports it (130)
        clean = True
        return rc
    except KeyboardInterrupt:
        print("dkilab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `dkilab ... | head`: the reader left
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if args.debug or not isinstance(exc, _user_errors()) and not (isinstance(exc, KeyError) and args.command in ("report", "rescore")):
            raise
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"dkilab: error: {text}", file=sys.stderr)
        return 2
    finally:
        leave_process_group(clean)


def leave_process_group(clean: bool) -> None:
    """A process of `accelerate launch` / torchrun leaves its process group before the interpreter ends. Left
    to interpreter shutdown, gloo's worker threads outlive it and the process aborts (SIGABRT, "terminate
    called without an active exception"; pytorch/pytorch#179291): 10 of 30 two-process runs here, 0 of 30
    after leaving (`python experiments/bench/concurrency.py`). On a clean end the processes meet first, so none leaves while another still sends to it."""
    dist = sys.modules.get("torch.distributed")  # never imported: no group to leave
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    if clean:
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
