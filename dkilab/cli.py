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


def _cmd_bench_retrieval(args: argparse.Namespace) -> int:
    from dkilab.bench.retrieval import main as bench_main

    return bench_main(args.config, data_dir=args.data_dir, question_limit=args.limit)


def _cmd_bench_strategies(args: argparse.Namespace) -> int:
    from dkilab.bench.strategies import main as bench_main

    return bench_main(data_dir=args.data_dir, questions=args.questions, model_spec=args.model,
                      max_prompt_tokens=args.max_prompt_tokens)


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
    br = bench_sub.add_parser("retrieval", help="recall@k / MRR of the recall stage alone on a dataset")
    br.add_argument("config", help="retrieval experiment YAML, e.g. experiments/retrieval_locomo.yaml")
    br.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    br.add_argument("--limit", type=int, default=None, help="questions per conversation")
    br.set_defaults(func=_cmd_bench_retrieval)
    bst = bench_sub.add_parser("strategies", help="tokens, latency per stage and fact calls of every strategy on LoCoMo")
    bst.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bst.add_argument("--questions", type=int, default=20, help="LoCoMo questions (default 20)")
    bst.add_argument("--model", default="offline:smollm2", help="model spec (default offline:smollm2)")
    bst.add_argument("--max-prompt-tokens", type=int, default=4096, help="prompt cap for every strategy (default 4096)")
    bst.set_defaults(func=_cmd_bench_strategies)
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
