"""`make wheelhouse`: the wheels `dkilab gpu --smoke-only` needs on a GPU node that already has torch,
transformers and accelerate (a site's own builds) and no network.

    python -m dkilab.gpu.wheelhouse --out wheelhouse                        # for this machine's Python
    python -m dkilab.gpu.wheelhouse --out wheelhouse --python-version 3.12  # for a node's (manylinux x86_64)

On the node, from the repository:

    pip install --no-index --find-links wheelhouse -r wheelhouse/requirements.txt
    PYTHONPATH=. python -m dkilab.cli gpu --smoke-only --report-dir reports/smoke

What goes in: `NEEDS` and their dependencies, pinned by constraints.txt (binary wheels; jieba publishes
only a source archive, so its pure-Python wheel is built here). torch, transformers, accelerate and their
own dependencies (numpy, regex, PyYAML, tokenizers, ...) are the node's. The tiny random-weight models
need no weights; the offline SmolLM2 check stays with the full `dkilab gpu` (its GGUF alone is 98 MB).
Refuses (exit 1) a wheelhouse over `LIMIT_MIB`.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# what the smoke-only path imports beyond torch, transformers, accelerate and their dependencies: the
# judge's module (dkilab.eval.scoring.judge) reaches the config types, the K/V block cache and the Chinese
# tokeniser. tests/gpu/test_wheelhouse.py proves the list in a clean virtualenv without network.
NEEDS = ("pydantic", "cachetools", "jieba")
SOURCE_ONLY = ("jieba",)  # no wheel on PyPI: built here (pure Python, any interpreter)
LIMIT_MIB = 60
ROOT = Path(__file__).resolve().parents[2]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def build(out: Path, python_version: str | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    constraints = ROOT / "constraints.txt"
    pins = ["-c", str(constraints)] if constraints.exists() else []
    binary = [n for n in NEEDS if n not in SOURCE_ONLY]
    target = ["--python-version", python_version, "--implementation", "cp", "--platform", "manylinux2014_x86_64",
              "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64"] if python_version else []
    _pip("download", "--quiet", "--only-binary=:all:", "--dest", str(out), *pins, *target, *binary)
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), *pins, *SOURCE_ONLY)
    wheels = sorted(out.glob("*.whl"))
    lines = []
    for w in wheels:
        name, version = w.name.split("-")[:2]
        lines.append(f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}")
    (out / "requirements.txt").write_text("\n".join(lines) + "\n")
    return wheels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dkilab.gpu.wheelhouse", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="wheelhouse", help="folder for the wheels and requirements.txt")
    p.add_argument("--python-version", default=None, help="the node's Python, e.g. 3.12 (default: this one)")
    args = p.parse_args(argv)
    wheels = build(Path(args.out), args.python_version)
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    for w in wheels:
        print(f"  {w.stat().st_size / 2**20:6.2f} MiB  {w.name}")
    print(f"{args.out}: {len(wheels)} wheels, {mib:.1f} MiB (limit {LIMIT_MIB}); on the node: pip install "
          f"--no-index --find-links {args.out} -r {args.out}/requirements.txt")
    if mib > LIMIT_MIB:
        print(f"dkilab wheelhouse: {mib:.1f} MiB is over the {LIMIT_MIB} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
