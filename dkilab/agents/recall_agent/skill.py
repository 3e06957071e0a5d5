"""The recall skill (seed recall-agent.md: "一份……加载的回忆 skill"): a standard Agent Skill file, YAML front matter
(`name`, `version`, `description`) and Markdown instructions, which the LLM policy reads before every plan.

    skill = load_skill()                      # the packaged skills/recall/SKILL.md
    skill = load_skill("my/SKILL.md")         # a researcher's own version (strategy param `skill`)

The whole file (front matter included) is part of a cell's identity: editing it, or its version, re-runs
the LLM-policy cells."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.config import parse_yaml

DEFAULT = Path(__file__).parent / "skills" / "recall" / "SKILL.md"


@dataclass(frozen=True)
class Skill:
    name: str
    version: str
    description: str
    instructions: str  # the Markdown body the model reads
    text: str  # the whole file: what the cell's hash covers
    path: str


def load_skill(path: str | Path | None = None) -> Skill:
    """The skill at `path` (default: the packaged recall skill); ValueError naming the file and the key."""
    p = Path(path) if path is not None else DEFAULT
    return _load(str(p.resolve()), stat_key(p) if p.exists() else ())


@lru_cache(maxsize=8)
def _load(path: str, stamp: tuple) -> Skill:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"recall skill {path}: no such file")
    text = p.read_text(encoding="utf-8")
    parts = text.split("---", 2)
    if not text.startswith("---") or len(parts) < 3:
        raise ValueError(f"recall skill {path}: no YAML front matter (the file must start with '---')")
    meta = parse_yaml(parts[1], f"recall skill {path}: front matter") or {}
    for key in ("name", "version", "description"):
        if not isinstance(meta, dict) or meta.get(key) in (None, ""):
            raise ValueError(f"recall skill {path}: front matter key '{key}' is missing")
    body = parts[2].strip()
    if not body:
        raise ValueError(f"recall skill {path}: no instructions after the front matter")
    return Skill(str(meta["name"]), str(meta["version"]), str(meta["description"]).strip(), body, text, path)
