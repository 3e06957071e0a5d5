"""Every finished cell keeps its identity when the code grows: the identity of each strategy's default params
and of a dataset spec is pinned here (tests/data/identity/defaults.json). A field added to a params model enters
every cell's hash, so every finished cell would run again, unless it is declared `knob(default, off=...)`
(dkilab/config.py), which keeps it out while off. A change meant to rerun cells (a default changed on
purpose) rewrites the file: `python -m tests.eval.harness.test_identity_snapshot`."""
import json
import sys

from dkilab.eval.harness.experiment import DatasetSpec, identity_params
from dkilab.strategies import STRATEGIES

from tests.conftest import ROOT

SNAPSHOT = ROOT / "tests" / "data" / "identity" / "defaults.json"


def identities() -> dict:
    required = {n for n in STRATEGIES if any(f.is_required() for f in STRATEGIES[n].Params.model_fields.values())}
    # a strategy with a required param (imported: its file) has no default cell to pin
    out = {f"strategy {name}": identity_params(STRATEGIES[name].Params()) for name in sorted(STRATEGIES)
           if name not in required}
    return out | {"dataset": identity_params(DatasetSpec(name="fixtures"))}


def _paths(d, prefix=""):
    for k, v in d.items():
        yield from _paths(v, f"{prefix}{k}.") if isinstance(v, dict) and v else [(f"{prefix}{k}", v)]


def test_default_identities_are_unchanged_unless_rewritten_on_purpose():
    pinned = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    now = {k: v for k, v in identities().items() if k in pinned}  # a strategy added since has no finished cells yet
    old, new = dict(_paths(pinned)), dict(_paths(now))
    added = sorted(set(new) - set(old))
    changed = sorted(k for k in set(new) & set(old) if new[k] != old[k]) + sorted(set(old) - set(new))
    assert not added, (f"new fields enter every cell's identity: {', '.join(added)}; declare a new lever with "
                       "knob(default, off=...) (dkilab/config.py), or rewrite the snapshot if every cell should rerun")
    assert not changed, f"default identities changed: {', '.join(changed)} (rewrite the snapshot if on purpose)"


def test_a_knob_is_out_of_the_identity_while_off_and_in_once_on():
    from dkilab.config import knob, knob_setting
    from pydantic import BaseModel

    class Params(BaseModel):
        size: int = 3
        lever: int = knob(0, ge=0, off=0)
        strength: float = knob_setting("lever", 0.5)

    assert identity_params(Params()) == {"size": 3}
    assert identity_params(Params(lever=2)) == {"size": 3, "lever": 2, "strength": 0.5}
    try:
        knob(1, off=0)
    except TypeError as e:
        assert "defaults to its off value" in str(e)
    else:
        raise AssertionError("a knob whose default is on was accepted")


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(identities(), indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
