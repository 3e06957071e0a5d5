"""Store benchmark (same as `dkilab bench store`): python experiments/bench/store.py [--scale N] [--queries N]."""
import argparse
import sys

from dkilab.bench.store import main

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--scale", type=int, default=100)
    p.add_argument("--queries", type=int, default=200)
    a = p.parse_args()
    sys.exit(main(a.data_dir, a.scale, a.queries))
