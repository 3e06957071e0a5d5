"""How often each named step of the recall agent ran in one finished cell, from its stored answers.

    .venv/bin/python tests/agents/count_steps.py EXPERIMENT CELL      # e.g. agents-recall rule@memdaily
"""
import collections
import gzip
import json
import sys

import mlflow
from dkilab.eval.tracking.store_uri import tracking_uri


def main(experiment: str, cell: str) -> int:
    mlflow.set_tracking_uri(tracking_uri(None))
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        print(f"no experiment {experiment!r} in {mlflow.get_tracking_uri()}", file=sys.stderr)
        return 2
    runs = mlflow.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{cell}'",
                              order_by=["start_time DESC"], output_format="list")
    if not runs:
        print(f"no run {cell!r} in experiment {experiment!r}", file=sys.stderr)
        return 2
    path = mlflow.artifacts.download_artifacts(run_id=runs[0].info.run_id, artifact_path="answers.jsonl.gz")
    steps, stops, n = collections.Counter(), collections.Counter(), 0
    for line in gzip.open(path, "rt"):
        row = json.loads(line)
        answer = row.get("answer") or row  # a row holds the whole Answer under "answer"; the header has none
        taken = (answer.get("metadata") or {}).get("agent_steps")
        if taken is None:
            continue
        n += 1
        steps.update(s.get("name") for s in taken if "tool" in s)
        stops[(answer.get("review") or {}).get("agent_stop")] += 1
    print(f"{cell} ({n} questions): " + ", ".join(f"{k} {v}" for k, v in steps.most_common()))
    for reason, k in stops.most_common():
        print(f"  stop: {reason}: {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
