"""Shared config helpers: YAML loading (duplicate keys refused) and errors that name the file and the
dotted key, in one line."""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A user's configuration is wrong: the message names the file and the dotted key (one line)."""


def _model_at(model, loc) -> type[BaseModel] | None:
    """The pydantic model that holds the key at `loc` (list indices and dict keys stepped over)."""
    import typing

    def models_in(tp):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [m for arg in typing.get_args(tp) for m in models_in(arg)]

    current = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt = []
        for m in current:
            field = m.model_fields.get(part)
            if field is not None:
                nxt += models_in(field.annotation)
        if nxt:
            current = nxt
    return current[0] if current and isinstance(current[0], type) else None


def describe_errors(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """'prefix.a.b: message; ...' for every error of a pydantic ValidationError; an unknown key names
    the closest known one ("did you mean ...?")."""
    import difflib

    parts = []
    for e in exc.errors():
        key = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and model is not None and e["loc"]:
            owner = _model_at(model, e["loc"][:-1])
            if owner is not None:
                known = list(owner.model_fields)
                close = difflib.get_close_matches(str(e["loc"][-1]), known, n=1)
                msg = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "") + \
                    f"; known keys: {', '.join(known)}"
        parts.append(f"{key}: {msg}" if key else msg)
    return "; ".join(parts)


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, source: str, what: str, prefix: str = "") -> M:
    """`model.model_validate(data)`, raising ConfigError('{source}: invalid {what}: {key}: {msg}')."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid {what}: {describe_errors(exc, prefix, model)}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (YAML would silently keep the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def set_dotted(data: dict, dotted: str, value: Any, *, create: bool = True, where: str = "") -> None:
    """Set `a.b.c` in nested mappings, in place. `create`: make missing sections (a config being written);
    otherwise every section and the key must exist already (updates to a validated block). Errors name
    `where` (or the key) and the part that does not fit."""
    *parents, leaf = dotted.split(".")
    node = data
    for p in parents:
        if p not in node and not create:
            raise ConfigError(f"{where or dotted}: no section {p!r}")
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where or dotted}: {p} is not a mapping")
    if leaf not in node and not create:
        raise ConfigError(f"{where or dotted}: no key {leaf!r}")
    node[leaf] = value


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except PermissionError:
        raise ConfigError(f"config file {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{at}: {problem}") from None


def read_jsonl(path: str | Path) -> list[Any]:
    """One JSON value per non-empty line; a bad line is a ValueError naming the file and the line."""
    import json

    path = Path(path)
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    return out
