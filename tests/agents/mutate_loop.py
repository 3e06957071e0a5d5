"""Remove each named step of the recall agent's closed loop in turn and show that a test fails (issue 32
item 2: "each is a named step with a test that fails when it is removed"). Not collected by pytest.

    .venv/bin/python tests/agents/mutate_loop.py        # prints one line per step; exit 1 if a removal survives
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/agents/test_recall_agent_loop.py", "tests/agents/test_recall_agent_steps.py",
         "tests/agents/test_recall_agent_statements.py"]
MUTATIONS = {  # step -> code that removes it
    "hypotheses' own queries": "for k in cues.KIND_QUERY: cues.KIND_QUERY[k] = {'zh': [], 'en': []}",
    "relevance against the hypothesis": "reflect.cues.statement_kind = lambda s: None",
    "narrow_hits": "reflect.TOO_MANY = 10**6",
    "rewrite_query": "reflect.rewrite_step = lambda state, h: None",
    "cover_hypothesis": "orig = reflect._as\n"
                        "reflect._as = lambda c, step, why=None: None if step == 'cover_hypothesis' else orig(c, step, "
                        "why)",
    "conflict context, both sides": "reflect.conflict_step = lambda state: None",
    "standing": "reflect.standing_step = lambda state: None",
}
RUN = """import sys, pytest
sys.path.insert(0, {root!r})
from dkilab.agents.recall_agent import reflect, cues
class P:
    def pytest_configure(self, config):
{code}
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *{tests!r}], plugins=[P()]))
"""


def main() -> int:
    survived = 0
    for step, code in MUTATIONS.items():
        body = "\n".join("        " + line for line in code.splitlines())
        out = subprocess.run([sys.executable, "-c", RUN.format(root=str(ROOT), code=body, tests=TESTS)], cwd=ROOT,
                             capture_output=True, text=True)
        failed = [ln.split("::")[-1] for ln in out.stdout.splitlines() if ln.startswith("FAILED")]
        survived += not failed
        print(f"{step:32s} removed -> {'SURVIVED' if not failed else 'fails: ' + ', '.join(failed)}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
