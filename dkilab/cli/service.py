"""`dkilab demo | ingest | serve | tracking-server | keys`: the memory store and the services over it."""
from __future__ import annotations

import argparse

from dkilab.cli.common import positive_int


def _cmd_demo(args: argparse.Namespace) -> int:
    from dkilab.demo import run_demo

    run_demo(args.store)
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    from dkilab.eval.data import dataset_info, load_dataset
    from dkilab.eval.harness.experiment import EmbedderSpec
    from dkilab.eval.harness.stores import store_for
    from dkilab.memory import Embedder

    convs = load_dataset(args.dataset, data_dir=args.data_dir, limit=args.limit)
    spec = EmbedderSpec(model=args.embedder or "auto").for_language(dataset_info(args.dataset)["language"])
    store = store_for(convs, args.dataset, Embedder(spec.model), path=args.store)
    users = len({c.user_id for c in convs})
    print(f"{args.store}: {store.count()} messages of {users} users from {args.dataset}")
    store.close()
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from dkilab.service.server import serve

    serve(args.store, args.keys, args.host, args.port)
    return 0


def _cmd_tracking_server(args: argparse.Namespace) -> int:
    from dkilab.eval.tracking.team_server import main as server_main

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


def add(sub) -> None:
    """Its commands' parsers, with their arguments."""
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
    ts.add_argument("--workers", type=positive_int, default=2, help="MLflow server worker processes (default 2)")
    ts.set_defaults(func=_cmd_tracking_server)

    keys = sub.add_parser("keys", help="API keys of the recall service (the file keeps hashes only)",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n  dkilab keys add alice --keys keys.yaml --note laptop\n  dkilab keys "
                                 "list --keys keys.yaml\n  dkilab keys revoke alice --keys keys.yaml\n  dkilab keys "
                                 "revoke --hash 3f1c0a9b --keys keys.yaml")
    keys.add_argument("action", choices=["add", "list", "revoke"])
    keys.add_argument("user", nargs="?",
                      help="add: the user id the new key is bound to; revoke: every key of this user")
    keys.add_argument("--hash", default=None, help="revoke: the one key whose sha256 starts with this (8+ hex digits)")
    keys.add_argument("--keys", required=True, help="keys file (created by the first add)")
    keys.add_argument("--note", default="", help="add: a note kept beside the hash")
    keys.set_defaults(func=_cmd_keys)
