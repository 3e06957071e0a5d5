"""Agent benchmark (same as `dkilab bench agents`): python experiments/bench/agents.py [--questions N] [--repeat N]."""
import argparse
import sys

from dkilab.bench.agents import main

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--repeat", type=int, default=20)
    a = p.parse_args()
    sys.exit(main(a.data_dir, a.questions, a.repeat))
