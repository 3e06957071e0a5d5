"""The README's figures from a command, checked or rewritten: every fenced block of README.md whose first
line is `$ dkilab report ...` shows that command's first table, read from a tracking store.

    python scripts/readme_figures.py [--tracking-uri URI] [--write]

Without `--write` it prints each stale block as a diff and exits 1 (0 when every block is what its command
prints); with `--write` it rewrites the stale blocks in place.

Every figure must be what the command prints, character for character, but the means of the token-count
columns (`TOKEN_COLUMNS`), which may differ by `TOKEN_TOLERANCE` of their value (their intervals are not
compared): the same code on the same fixtures gives recall_v4's prompt tokens 807.0 on an Intel Xeon (AMX) and
804.9 on an AMD EPYC (Zen 4), full_attention's injected tokens 579.1 and 578.0, and every score, rate and evidence
figure alike (docs/experiments.md#the-readmes-figures). A code change that moves a question's prompt by a few
tokens on average still reads as stale. `make readme-figures` runs the quickstart into
a fresh store first, then writes; the slow suite does the same and fails on a stale block
(tests/test_readme_figures.py).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import math
import os
import re
import shlex
import sys
from pathlib import Path

from dkilab.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"^```\n(\$ dkilab report [^\n]*)\n(.*?)^```$", re.S | re.M)


def command_output(command: str, uri: str | None) -> str:
    """What `command` (a `$ dkilab ...` line) prints, run in this process against `uri`."""
    args = shlex.split(command.removeprefix("$ dkilab "))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(args + (["--tracking-uri", uri] if uri else []))
    if code != 0:
        raise SystemExit(f"{README.name}: `{command[2:]}` exited {code}: {out.getvalue().strip()[-500:]}")
    return out.getvalue()


def shown(output: str) -> str:
    """The part of a command's output a README block shows: its first table (up to the legend or a blank
    line), each line without trailing spaces."""
    lines = []
    for line in output.splitlines():
        if not line.strip() or line.startswith("("):
            break
        lines.append(line.rstrip())
    return "\n".join(lines)


# the columns that count tokens, and how far their means may move between machines (see the module's doc)
TOKEN_COLUMNS = frozenset({"prompt_tokens", "injected_tokens", "tokens_processed", "fact_tokens"})
TOKEN_TOLERANCE = 0.005


def _mean(value: str) -> float | None:
    try:
        mean = float(value.split()[0])
    except (ValueError, IndexError):
        return None
    return mean if math.isfinite(mean) else None


def _fields(header: str, row: str) -> list[str] | None:
    """A table row as its label and one value per column: the columns are right-aligned under their names."""
    ends = [m.end() for m in re.finditer(r"\S+", header)]
    label = row.split()[0] if row.split() else ""
    if not label or len(row) != ends[-1] or row.index(label) + len(label) >= ends[0]:
        return None
    cuts = [len(label)] + ends
    return [label] + [row[i:j].strip() for i, j in zip(cuts, cuts[1:])]


def same_table(was: str, now: str) -> bool:
    """Whether a README block shows what the command shows now: the same lines, but for the means of the token
    columns, which may differ by `TOKEN_TOLERANCE` (relative)."""
    if was == now:
        return True
    a, b = was.splitlines(), now.splitlines()
    if len(a) != len(b) or not a or a[0] != b[0]:
        return False
    header = a[0].split()
    for x, y in zip(a[1:], b[1:]):
        if x == y:
            continue
        xs, ys = _fields(a[0], x), _fields(a[0], y)
        if xs is None or ys is None or xs[0] != ys[0]:
            return False
        for column, u, v in zip(header, xs[1:], ys[1:]):
            if u == v:
                continue
            mu, mv = _mean(u), _mean(v)
            if column not in TOKEN_COLUMNS or mu is None or mv is None:
                return False
            if abs(mu - mv) > TOKEN_TOLERANCE * max(abs(mu), abs(mv)):
                return False
    return True


def stale_blocks(uri: str | None, text: str | None = None) -> list[tuple[str, str, str]]:
    """(command, the README's block, what the command shows now) of every block that differs."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out = []
    for m in BLOCK.finditer(text):
        now = shown(command_output(m.group(1), uri))
        was = "\n".join(line.rstrip() for line in m.group(2).rstrip().splitlines())
        if not same_table(was, now):
            out.append((m.group(1), was, now))
    return out


def rewritten(uri: str | None, text: str) -> str:
    return BLOCK.sub(lambda m: f"```\n{m.group(1)}\n{shown(command_output(m.group(1), uri))}\n```", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracking-uri", help="the store the figures were logged to (default: dkilab's)")
    ap.add_argument("--write", action="store_true", help="rewrite the stale blocks in README.md")
    args = ap.parse_args(argv)
    stale = stale_blocks(args.tracking_uri)
    if args.write and stale:
        new = rewritten(args.tracking_uri, README.read_text(encoding="utf-8"))
        tmp = README.with_name(f".{README.name}.{os.getpid()}.tmp")  # a stopped rewrite leaves README.md whole
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, README)
        print(f"README.md: {len(stale)} block(s) rewritten: " + "; ".join(c[2:] for c, _, _ in stale))
        return 0
    for command, was, now in stale:
        print(f"README.md: stale output of `{command[2:]}`:")
        sys.stdout.writelines(difflib.unified_diff(was.rstrip().splitlines(True), now.rstrip().splitlines(True),
                                                   "README.md", "now", lineterm="\n"))
        print()
    print(f"README.md: {len(stale)} stale block(s)" if stale else "README.md: every `dkilab report` block is current")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
