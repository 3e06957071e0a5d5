"""API keys of the recall service: a key (header `X-API-Key`) maps to one user id; the keys file holds
only SHA-256 hashes of the keys, never the keys themselves.

    # keys.yaml (written by `dkilab keys add USER --keys keys.yaml`, which prints the key once)
    keys:
      - {user_id: alice, sha256: 3f1c...}
      - {user_id: bob, sha256: 9a0d..., note: laptop}

Keys are 32 random bytes (urlsafe base64), so a plain hash is enough: nothing to brute-force.
"""
from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dkilab.config import ConfigError, describe_errors

KEY_PREFIX = "dk_"
API_KEY_HEADER = "X-API-Key"


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str = Field(min_length=1, max_length=256)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    note: str = ""


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[KeyEntry] = Field(default_factory=list)

    @field_validator("keys")
    @classmethod
    def _unique(cls, v: list[KeyEntry]) -> list[KeyEntry]:
        seen = set()
        for i, e in enumerate(v):
            if e.sha256 in seen:
                raise ValueError(f"keys.{i}: the same key hash is listed twice")
            seen.add(e.sha256)
        return v


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def read_keys(path: str | Path) -> KeysFile:
    """The keys file, validated; a missing or malformed file is a ConfigError naming the file and key."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"keys file {path} does not exist (create one with: dkilab keys add USER --keys {path})")
    try:
        return KeysFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except Exception as e:  # yaml or validation
        detail = describe_errors(e) if hasattr(e, "errors") else str(e)
        raise ConfigError(f"keys file {path}: {detail}") from e


def add_key(path: str | Path, user_id: str, note: str = "") -> str:
    """Append a new key for `user_id` to the keys file (created if missing); -> the key, shown only now."""
    import yaml

    path = Path(path)
    keys = read_keys(path) if path.exists() else KeysFile()
    key = new_key()
    keys.keys.append(KeyEntry(user_id=user_id, sha256=hash_key(key), note=note))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(keys.model_dump(), allow_unicode=True, sort_keys=False), encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)  # atomic: a crash leaves the old file or the new one, never half of one
    return key


class KeyRing:
    """key -> user id. The lookup is by the key's SHA-256, so timing says nothing about the key's text."""

    def __init__(self, keys: KeysFile):
        self._users = {e.sha256: e.user_id for e in keys.keys}

    def user_for(self, key: str | None) -> str | None:
        if not key or len(key) > 256:
            return None
        return self._users.get(hash_key(key))

    def __len__(self) -> int:
        return len(self._users)
