"""Shared config helpers: YAML loading (duplicate keys refused) and errors that name the file and the
dotted key, in one line."""
from __future__ import annotations

import copy
import difflib
import json
import os
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError


class ConfigError(ValueError):
    """A user's configuration is wrong: the message names the file and the dotted key (one line)."""


def _takes_number_not_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return False
    args = typing.get_args(annotation)
    if args:
        parts = [a for a in args if a is not type(None)]
        return any(a in (int, float) for a in parts) and bool not in parts and Any not in parts
    return annotation in (int, float)


def refuse_bool_numbers(model: type[BaseModel], data: Any) -> Any:
    """For a `mode="before"` validator: a YAML yes/no given to a number field (`history_budget: true`), which
    pydantic would read as 1, is an error naming the field."""
    if isinstance(data, dict):
        for key, value in data.items():
            field = model.model_fields.get(key) if isinstance(key, str) else None
            if isinstance(value, bool) and field is not None and _takes_number_not_bool(field.annotation):
                raise ValueError(f"{key}: {str(value).lower()} is a yes/no; {key} takes a number")
    return data


def _model_at(model, loc) -> type[BaseModel] | None:
    """The pydantic model that holds the key at `loc` (list indices and dict keys stepped over)."""
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


def knob(default: Any, *, off: Any, **field: Any) -> Any:
    """A field for a lever added to a params model after cells were logged: `off` is the value at which it
    does nothing, and the default. A cell's identity leaves the field out while it is off
    (`identity_params`), so adding the lever changes no finished cell's hash; switched on, it is in."""
    if default != off:
        raise TypeError(f"a knob defaults to its off value ({off!r}), not {default!r}: otherwise every finished "
                        "cell's identity would change")
    return Field(default, json_schema_extra={"off": off}, **field)


def knob_setting(lever: str, default: Any, **field: Any) -> Any:
    """A field that only matters while its sibling `lever` (a `knob`) is on: out of a cell's identity while
    the lever is off."""
    return Field(default, json_schema_extra={"off_with": lever}, **field)


def merge_nested(base: dict, over: dict) -> dict:
    """A copy of `over` on top of `base`, nested mappings merged key by key (`{"signals": {"x": 1}}` changes
    that one key of a `signals` block in `base`)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge_nested(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def drop_nested(data: dict, tree: dict) -> dict:
    """A copy of `data` without the keys `tree` sets (nested mappings walked key by key; a leaf of `tree` drops
    that key of `data` whatever it holds)."""
    out = {}
    for k, v in data.items():
        if k not in tree:
            out[k] = copy.deepcopy(v)
        elif isinstance(tree[k], dict) and isinstance(v, dict):
            if rest := drop_nested(v, tree[k]):
                out[k] = rest
    return out


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


MAX_YAML_BYTES = 8 * 1024**2
MAX_YAML_VALUES = 200_000  # values once aliases are expanded (a 1 KB "billion laughs" file expands to billions)


def _expanded_values(data: Any, limit: int) -> int:
    """How many values `data` holds with every alias expanded, counting no further than `limit` + 1."""
    n, stack = 0, [data]
    while stack and n <= limit:
        node = stack.pop()
        n += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return n


def parse_yaml(text: str, where: str) -> Any:
    """YAML text (duplicate keys refused), at most MAX_YAML_VALUES values with its aliases expanded; any problem
    is a ConfigError naming `where`. Every YAML dkilab reads goes through here (configs, scripted models and
    judges, keys, skills, published judges' prompts): a 1 KB alias bomb is refused, never expanded."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from None
    if _expanded_values(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise ConfigError(f"{where}: over {MAX_YAML_VALUES:,} values once its aliases (*name) are expanded: refused "
                          "(an alias bomb, or a file far larger than dkilab reads)")
    return data


def read_yaml(path: str | Path) -> Any:
    """A YAML file, at most MAX_YAML_BYTES, read by `parse_yaml`; any problem is a ConfigError naming the file."""
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > MAX_YAML_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, over the {MAX_YAML_BYTES:,} a config may have")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except PermissionError:
        raise ConfigError(f"config file {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    return parse_yaml(text, str(path))


def read_jsonl(path: str | Path) -> list[Any]:
    """One JSON value per non-empty line; a bad line is a ValueError naming the file and the line."""
    path = Path(path)
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    return out


def under_data_dir(path: str, data_dir: str | None = None) -> Path:
    """A file a config names: absolute, else under the data dir (`data_dir`, else $DKILAB_DATA_DIR) where it is
    there, else from the working directory (the first try when neither exists, for the error to name)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    data = data_dir or os.environ.get("DKILAB_DATA_DIR")
    tries = ([Path(data).expanduser() / p] if data else []) + [Path.cwd() / p]
    return next((t for t in tries if t.exists()), tries[0])
