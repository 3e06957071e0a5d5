"""The README's figures from a command, checked or rewritten: every fenced block of README.md whose first
line is `$ dkilab report ...` shows that command's first table, read from a tracking store.

    python scripts/readme_figures.py [--tracking-uri URI] [--write]

Without `--write` it prints each stale block as a diff and exits 1 (0 when every block is what its command
prints); with `--write` it rewrites the stale blocks in place. `make readme-figures` runs the quickstart into
a fresh store first, then writes; the slow suite does the same and fails on a stale block
(tests/test_readme_figures.py).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
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


def stale_blocks(uri: str | None, text: str | None = None) -> list[tuple[str, str, str]]:
    """(command, the README's block, what the command shows now) of every block that differs."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out = []
    for m in BLOCK.finditer(text):
        now = shown(command_output(m.group(1), uri))
        was = "\n".join(line.rstrip() for line in m.group(2).rstrip().splitlines())
        if was != now:
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
