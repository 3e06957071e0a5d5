"""How often each dataset's questions carry a reference cue, by the scope the resolver maps it to and the cue
(issue 87): the questions `signals.reference_front` would put the referenced turns in front of. Each question is
resolved against its conversation's last 100 messages. docs/retrieval.md ("The referenced turns in front").

    DKILAB_DATA_DIR=... .venv/bin/python experiments/bench/reference_cues.py
"""
from collections import Counter

from dkilab.eval.data import load_dataset
from dkilab.recall import ReferenceResolver

DATASETS = ["locomo", "memdaily", "madial_bench_en", "madial_bench_zh", "worksessions"]


def main() -> None:
    resolver = ReferenceResolver()
    for name in DATASETS:
        counts: Counter = Counter()
        total = 0
        for conv in load_dataset(name):
            for q in conv.questions:
                total += 1
                res = resolver.resolve(q.question, conv.messages[-100:])
                if res.reference_type.value != "none":
                    counts[(res.scope.value, res.matched_keyword)] += 1
        cues = ", ".join(f"{scope} '{cue}' {n}" for (scope, cue), n in counts.most_common(6))
        print(f"{name:18s} {total:5d} questions, {sum(counts.values()):4d} with a cue: {cues or '-'}")


if __name__ == "__main__":
    main()
