"""`dkilab import FILE...`: published predictions as cells of an experiment (strategy `imported`), scored like
generated ones, with the file's own verdicts as `published_judge` and paired differences between the files."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_import(args: argparse.Namespace) -> int:
    import os

    from dkilab.cli.experiments import _print_results
    from dkilab.eval.data.published import PredictionsError
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.imported import check_import, file_categories, import_config
    from dkilab.eval.harness.runner import run_experiment

    if args.data_dir:
        os.environ["DKILAB_DATA_DIR"] = args.data_dir
    for f in args.files:
        if not Path(f).is_file():
            print(f"dkilab import: {f}: no such file", file=sys.stderr)
            return 2
    try:
        cats = args.categories.split(",") if args.categories else file_categories(args.files, args.format)
        data = import_config(args.files, args.dataset, name=args.experiment, labels=args.label, fmt=args.format,
                             answer_model=args.answer_model, categories=cats, exclude_audited=args.exclude_audited,
                             max_error_rate=args.max_error_rate)
        cfg = experiment_from_dict(data, "<dkilab import>")
        if cats:
            print(f"dkilab import: categories {', '.join(cats)} of {args.dataset} (those the files answer)")
        for line in check_import(cfg, args.data_dir):
            print(f"dkilab import: {line}")
    except PredictionsError as exc:
        print(f"dkilab import: refused: {exc}", file=sys.stderr)
        return 2
    results = run_experiment(cfg, data_dir=args.data_dir, uri=args.tracking_uri, config_path="<dkilab import>")
    return _print_results(cfg, results, args.tracking_uri)


def add(sub) -> None:
    imp = sub.add_parser("import", help="published predictions (eval_results.json, JSONL, CSV) as cells of an "
                                        "experiment: every dkilab metric, the file's own judge, paired differences",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab import $DKILAB_DATA_DIR/locomo_audit/fc-baseline/gpt-4o-mini-"
                                "{memos,cot}/eval_results.json --dataset locomo --exclude-audited locomo_audit/audit\n"
                                "  dkilab import answers.jsonl --dataset fixtures --label mine --experiment my-imports")
    imp.add_argument("files", nargs="+", help="predictions files, one cell each")
    imp.add_argument("--dataset", required=True, help="the registered dataset the predictions answer (e.g. locomo)")
    imp.add_argument("--format", default="auto",
                     help="the reader: auto (by name and content), eval_results, jsonl, csv or one registered with "
                          "dkilab.eval.data.published.register_reader")
    imp.add_argument("--label", action="append", help="a cell label per file, in order (default: from its path)")
    imp.add_argument("--experiment", default=None, help="the MLflow experiment (default: imported-DATASET)")
    imp.add_argument("--answer-model", default=None, help="who wrote the answers, where the files do not say")
    imp.add_argument("--categories", default=None,
                     help="comma-separated categories of the dataset to match (default: those the files name)")
    imp.add_argument("--exclude-audited", default=None, metavar="PATH",
                     help="LoCoMo: also score without the questions the public audit finds wrong (its audit folder)")
    imp.add_argument("--max-error-rate", type=float, default=0.0,
                     help="share of the questions allowed without a prediction (default 0: every one needs one)")
    imp.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    imp.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: the project's store)")
    imp.set_defaults(func=_cmd_import)
