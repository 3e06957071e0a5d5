"""Shared config helpers: YAML loading and pydantic errors that name the file and the dotted key."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


def describe_errors(exc: ValidationError, prefix: str = "") -> str:
    """'prefix.a.b: message; ...' for every error of a pydantic ValidationError."""
    head = f"{prefix}." if prefix else ""
    return "; ".join(f"{head}{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def validate(model: type[BaseModel], data: Any, source: str, what: str, prefix: str = "") -> BaseModel:
    """`model.model_validate(data)`, raising ValueError('{source}: invalid {what}: {key}: {msg}')."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{source}: invalid {what}: {describe_errors(exc, prefix)}") from None


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"config file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
