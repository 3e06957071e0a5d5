"""`dkilab bench ...`: benchmarks that print figures."""
from __future__ import annotations

import argparse
import sys


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


def _cmd_bench_published(args: argparse.Namespace) -> int:
    from dkilab.bench.published import main

    return main(args.data_dir, args.tracking_uri)


def _cmd_bench_retrieval(args: argparse.Namespace) -> int:
    train_only = [flag for flag, on in (("--out", args.out),
                                        ("--turn-alone", args.turn_alone and not args.leave_one_dataset_out),
                                        ("--english-e5-part", args.english_e5_part),
                                        ("--no-cue-parts", args.no_cue_parts), ("--english", args.english),
                                        ("--no-guard", args.no_guard)) if on]
    if train_only and not args.train:  # a model would not be fitted: say so rather than run the bench
        raise SystemExit(f"dkilab bench retrieval: {', '.join(train_only)} only with --train (fitting the fusion model)"
                         + (" (--turn-alone also with --leave-one-dataset-out)" if args.turn_alone else ""))
    if sum(map(bool, (args.train, args.peers, args.leave_one_dataset_out))) > 1:
        raise SystemExit(
            "dkilab bench retrieval: --train, --peers and --leave-one-dataset-out are separate runs: give one")
    if args.leave_one_dataset_out:
        from dkilab.bench.lodo import main as lodo_main

        return lodo_main(data_dir=args.data_dir, metric=args.metric, tracking_uri=args.tracking_uri,
                         turn_alone=args.turn_alone)
    if args.train:
        from pathlib import Path

        from dkilab.bench.fusion_train import train

        train(data_dir=args.data_dir, out=Path(args.out) if args.out else None,
              turn_alone=args.turn_alone, english_e5=args.english_e5_part,
              cue_parts=not args.no_cue_parts, english=args.english, guard=not args.no_guard)
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

    if args.shapes:
        from dkilab.bench.abstention_shapes import main as shapes_main

        return shapes_main(show_errors=args.errors, judge=args.judge)
    if args.real:
        from dkilab.bench.abstention_real import main as real_main

        return real_main(args.data_dir, show_errors=args.errors, save=args.save)
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
              "or other, reading the question first; then: dkilab bench abstention --second-reader "
              f"{args.label_sheet})")
        return 0
    return bench_main(split=args.split, judge=args.judge, show_errors=args.errors, train=args.train,
                      judge_per_source=args.judge_per_source, external=args.external, data_dir=args.data_dir,
                      second_reader=args.second_reader)


def add(sub) -> None:
    """Its commands' parsers, with their arguments."""
    bench = sub.add_parser("bench", help="benchmarks that print figures",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  dkilab bench store --parts concurrency,open\n  dkilab bench serve "
                                "--clients 8 --seconds 10\n  dkilab bench abstention --errors\n  dkilab bench agents "
                                "--questions 50")
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
    bst = bench_sub.add_parser("strategies",
                               help="tokens, latency per stage and fact calls of every strategy on LoCoMo")
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
    brt = bench_sub.add_parser("retrieval",
                               help="recall defaults (the dev-tuned pipeline) vs the previous defaults vs single "
                                    "signals on held-back data (experiments/retrieval_bench.yaml), paired")
    brt.add_argument("--data-dir", default=None)
    brt.add_argument("--metric", default="recall_at_10")
    brt.add_argument("--peers", action="store_true",
                     help="also run engram-search and rank-bm25 on the same questions (pip install 'dkilab[peers]')")
    brt.add_argument("--tracking-uri", default=None)
    brt.add_argument("--leave-one-dataset-out", action="store_true",
                     help="refit the fusion without each dataset in turn and score that dataset's test split, paired "
                          "against the previous defaults and the single signals")
    brt.add_argument("--train", action="store_true",
                     help="refit the learned fusion on the dev split only (dkilab/recall/fusion_lr.json), then stop")
    brt.add_argument("--out", default=None, help="with --train: write the model here instead")
    brt.add_argument("--turn-alone", action="store_true",
                     help="with --train: fit on English stores that embed each turn alone (index text v1); "
                          "with --leave-one-dataset-out: also score every held-out pipeline on such stores, paired")
    brt.add_argument("--english-e5-part", action="store_true",
                     help="with --train: also fit a part for English questions on e5 stores (LoCoMo dev), e5:en")
    brt.add_argument("--no-cue-parts", action="store_true",
                     help="with --train: no parts for conversational cues (leave MADial-Bench dev out): the ablation "
                          "model")
    brt.add_argument("--english", default=None, metavar="ENCODER",
                     help="with --train: the encoder `auto` gives English data (offline:minilm: the stock ablation "
                          "models)")
    brt.add_argument("--no-guard", action="store_true",
                     help="with --train: no range guard (by default a question whose candidates lie outside the "
                          "fitted range gets the weighted fusion's order): the ablation model")
    brt.set_defaults(func=_cmd_bench_retrieval)
    bpub = bench_sub.add_parser("published", help="GPT-4o-mini's published LoCoMo replies and the audit's wrong "
                                                  "answers imported as cells: the published judge against dkilab's "
                                                  "LoCoMo score, by category, with and without the audited golds")
    bpub.add_argument("--data-dir", default=None, help="dataset directory (default: $DKILAB_DATA_DIR)")
    bpub.add_argument("--tracking-uri", default=None)
    bpub.set_defaults(func=_cmd_bench_published)
    bgen = bench_sub.add_parser("generation", help="tokens/s of batched greedy generation at several batch sizes")
    bgen.add_argument("--model", default="offline:smollm2")
    bgen.add_argument("--prompts", type=int, default=16)
    bgen.add_argument("--new-tokens", type=int, default=24)
    bgen.add_argument("--batch-sizes", default="1,4,8,16")
    bgen.set_defaults(func=_cmd_bench_generation)
    bg = bench_sub.add_parser("agents", help="recall-agent latency on LoCoMo-sized users and pointer resolution time")
    bg.add_argument("--data-dir", default=None,
                    help="dataset directory (default: $DKILAB_DATA_DIR; else a synthetic user)")
    bg.add_argument("--questions", type=int, default=200, help="questions for the recall agent (default 200)")
    bg.add_argument("--repeat", type=int, default=20, help="passes over the pointer scenarios (default 20)")
    bg.set_defaults(func=_cmd_bench_agents)
    ba = bench_sub.add_parser("abstention",
                              help="precision/recall of the abstention detector on the labelled phrasings")
    ba.add_argument("--split", choices=["test", "dev"], default="test", help="held-out test half (default) or dev half")
    ba.add_argument("--judge", default=None, help="also measure an LLM judge (model spec, e.g. offline:smollm2)")
    ba.add_argument("--errors", action="store_true", help="list the phrasings each detector gets wrong")
    ba.add_argument("--train", action="store_true", help="refit the hybrid detector's weights on every source first")
    ba.add_argument("--judge-per-source", type=int, default=4,
                    help="rows per source and language the --judge model labels (default 4)")
    ba.add_argument("--external", action="store_true",
                    help="also the check on replies written by other people (KdConv, "
                    "LoCoMo; needs the data dir): figures per part, the dev part's errors with --errors")
    ba.add_argument("--data-dir", default=None, help="dataset directory for --external (default: $DKILAB_DATA_DIR)")
    ba.add_argument("--label-sheet", default=None, metavar="OUT", help="write the external check's replies, blind, for "
                    "a second reader to label (a path outside the project: it holds dataset text), and stop")
    ba.add_argument("--second-reader", default=None, metavar="FILE", help="with the external check: another reader's "
                    "label file (a filled --label-sheet); prints the agreement and the figures under those labels")
    ba.add_argument("--real", action="store_true", help="only the check on real model replies: GPT-4o-mini's "
                    "LoCoMo answers (the LoCoMo audit in the data dir) labelled in datasets/fixtures/abstention/"
                    "real_replies_labels.jsonl, held out by conversation (with --errors: the dev part's errors)")
    ba.add_argument("--save", action="store_true", help="with --real: write the held-out figures into the weights "
                    "(dkilab/text/abstention/lr.json, the detector's card)")
    ba.add_argument("--shapes", action="store_true", help="only the reply-shapes check: the held-back third "
                    "of datasets/fixtures/abstention/reply_shapes.jsonl per language and shape (with --errors: its "
                    "errors; with --judge MODEL: that LLM judge on the same rows)")
    ba.set_defaults(func=_cmd_bench_abstention)
