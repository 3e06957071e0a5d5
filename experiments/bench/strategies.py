"""Strategy benchmark (same as `dkilab bench strategies`): python experiments/bench/strategies.py [--questions N]."""
import argparse
import sys

from dkilab.bench.strategies import main

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--model", default="offline:smollm2")
    p.add_argument("--max-prompt-tokens", type=int, default=4096)
    a = p.parse_args()
    sys.exit(main(data_dir=a.data_dir, questions=a.questions, model_spec=a.model, max_prompt_tokens=a.max_prompt_tokens))
