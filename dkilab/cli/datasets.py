"""`dkilab datasets list | show`: the dataset loaders and what a dataset holds."""
from __future__ import annotations

import argparse


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dkilab.eval.data import DATASETS, dataset_available, load_dataset

    if args.action == "list" or not args.name:
        import os

        where = args.data_dir or os.environ.get("DKILAB_DATA_DIR")
        print(f"data dir: {where} ({'--data-dir' if args.data_dir else '$DKILAB_DATA_DIR'})" if where else
              "data dir: not set (--data-dir or $DKILAB_DATA_DIR): what is present below is bundled with dkilab")
        import pandas as pd

        iso = {"cn": "zh"}  # the loaders' internal code for Chinese; ISO 639-1 says zh
        rows = [{"dataset": name, "language": iso.get(meta["language"], meta["language"]), "scorer": meta["scorer"],
                 "version": f"v{meta['version']}",
                 "here": "present" if dataset_available(name, args.data_dir) else "not in the data dir",
                 "description": meta["description"]} for name, meta in ((n, DATASETS.meta(n))
                                                                        for n in DATASETS.names())]
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
    print(_lengths([m.content for c in convs for m in c.messages], {c.language for c in convs}))
    return 0


def _lengths(texts: list[str], languages: set[str]) -> str:
    """The messages' lengths in the tokens of the encoder `embedder: auto` gives the data, against its window."""
    import numpy as np

    from dkilab.encoders.embedder import DEFAULT_EMBEDDER, E5_EMBEDDER, Embedder

    embedder = Embedder(DEFAULT_EMBEDDER if languages == {"en"} else E5_EMBEDDER)
    n = np.array(embedder.count_tokens(texts) if texts else [0])
    window = embedder.window
    return (f"message tokens ({embedder.model_name}, window {window}): median {np.median(n):.0f}, 10th-90th "
            f"percentile {np.percentile(n, 10):.0f}-{np.percentile(n, 90):.0f}, {int((n > window).sum())} of "
            f"{len(texts)} over the window")


def add(sub) -> None:
    """Its commands' parsers, with their arguments."""
    ds = sub.add_parser("datasets", help="list the dataset loaders or describe one dataset",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab datasets list --data-dir ../shared/datasets\n  dkilab datasets "
                                "show session_flow")
    ds.add_argument("action", choices=["list", "show"])
    ds.add_argument("name", nargs="?")
    ds.add_argument("--data-dir", default=None)
    ds.set_defaults(func=_cmd_datasets)
