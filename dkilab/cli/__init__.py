"""`dkilab` command line: one module per command group (service, bench, experiments, datasets), each owning
its commands' arguments; `main` runs one and turns user errors into one line."""
from __future__ import annotations

import argparse
import sys

from dkilab import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dkilab", description="Conversational-memory research workbench.")
    p.add_argument("--version", action="version", version=f"dkilab {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of a user error (config, data, model)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    from dkilab.cli import bench, datasets, experiments, imports, service

    for group in (service, bench, experiments, imports, datasets):  # each owns its commands and their arguments
        group.add(sub)
    return p


def _user_errors() -> tuple[type[BaseException], ...]:
    from dkilab.config import ConfigError
    from dkilab.eval.data.base import DatasetNotFoundError
    from dkilab.eval.data.published import PredictionsError
    from dkilab.eval.harness.rescore import StoredAnswersError
    from dkilab.eval.views.report import ScriptedRunsError, TrackingStoreError, UnknownExperimentError
    from dkilab.models.loading import ModelNotAvailableError
    from dkilab.registry import UnknownNameError

    return (ConfigError, DatasetNotFoundError, ModelNotAvailableError, UnknownNameError, ScriptedRunsError,
            TrackingStoreError, UnknownExperimentError, StoredAnswersError, PredictionsError)


# loggers whose INFO lines are noise on a console: MLflow's "Flushing the async trace logging queue ... This may
# take a while" after the summary; warnings and errors still show
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
    from dkilab.eval.harness import interrupt

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
        if args.debug or not isinstance(exc, _user_errors()) and not (isinstance(exc, KeyError)
                                                                      and args.command in ("report", "rescore")):
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
    after leaving (`python experiments/bench/concurrency.py`). On a clean end the processes meet first, so none
    leaves while another still sends to it."""
    dist = sys.modules.get("torch.distributed")  # never imported: no group to leave
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    if clean:
        dist.barrier()
    dist.destroy_process_group()

