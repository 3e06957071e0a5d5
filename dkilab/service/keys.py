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
import os
import secrets
import tempfile
import threading
import time
import warnings
from pathlib import Path

import yaml
from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dkilab.config import ConfigError, describe_errors, read_yaml
from dkilab.memory.sessions import check_user

KEY_PREFIX = "dk_"
API_KEY_HEADER = "X-API-Key"


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str = Field(min_length=1, max_length=256)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    note: str = ""

    @field_validator("user_id")
    @classmethod
    def _user(cls, v: str) -> str:
        return check_user(v)  # the one rule for user ids (sessions use it too): no whitespace, not empty


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
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"keys file {path} does not exist (create one with: dkilab keys add USER --keys {path})")
    try:
        return KeysFile.model_validate(read_yaml(path) or {})
    except ConfigError as e:
        raise ConfigError(f"keys file {e}") from None
    except Exception as e:  # yaml or validation
        detail = describe_errors(e) if isinstance(e, ValidationError) else str(e)
        raise ConfigError(f"keys file {path}: {detail}") from e


def _locked(path: Path):
    """The keys file's lock (`<file>.lock` beside it): one `add` or `revoke` reads and rewrites it at a time,
    across processes, so none loses another's change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path.with_name(path.name + ".lock")), timeout=60)


def _write(path: Path, keys: KeysFile) -> None:
    """Written to a temp file of its own, then renamed over the keys file (atomic: a crash leaves the old
    file or the new one, never half of one); called holding `_locked(path)`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(yaml.safe_dump(keys.model_dump(), allow_unicode=True, sort_keys=False))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_key(path: str | Path, user_id: str, note: str = "") -> str:
    """Append a new key for `user_id` to the keys file (created if missing); -> the key, shown only now.
    A user id the sessions would refuse (empty, whitespace) is a ValueError naming it."""
    path = Path(path)
    check_user(user_id)
    key = new_key()
    with _locked(path):
        keys = read_keys(path) if path.exists() else KeysFile()
        keys.keys.append(KeyEntry(user_id=user_id, sha256=hash_key(key), note=note))
        _write(path, keys)
    return key


def revoke_keys(path: str | Path, user_id: str | None = None, sha256_prefix: str | None = None) -> list[KeyEntry]:
    """Remove every key of `user_id`, or the one key whose hash starts with `sha256_prefix` (at least 8 hex
    digits, as `dkilab keys list` shows); -> the removed entries. A running service stops accepting them
    at its next request (it re-reads the file when it changes)."""
    path = Path(path)
    if (user_id is None) == (sha256_prefix is None):
        raise ValueError("revoke: give a user id or --hash PREFIX (one of them)")
    with _locked(path):
        return _revoke(path, read_keys(path), user_id, sha256_prefix)


def _revoke(path: Path, keys: KeysFile, user_id: str | None, sha256_prefix: str | None) -> list[KeyEntry]:
    if sha256_prefix is not None:
        if len(sha256_prefix) < 8:
            raise ValueError(f"revoke --hash {sha256_prefix!r}: give at least 8 hex digits of the hash")
        gone = [e for e in keys.keys if e.sha256.startswith(sha256_prefix.lower())]
        if len(gone) > 1:
            raise ValueError(f"revoke --hash {sha256_prefix!r}: {len(gone)} keys match; give more digits")
    else:
        gone = [e for e in keys.keys if e.user_id == str(user_id)]
    if not gone:
        raise ValueError(f"{path}: no key for {user_id!r}" if user_id is not None
                         else f"{path}: no key hash starts with {sha256_prefix!r}")
    keys.keys = [e for e in keys.keys if e not in gone]
    _write(path, keys)
    return gone


class KeyRing:
    """key -> user id. The lookup is by the key's SHA-256, so timing says nothing about the key's text.

    Built from a file (`KeyRing.from_file`), it re-reads the file whenever it changes (checked at most
    every `check_every` seconds), so an added key works and a removed one stops working without a
    restart. A file that became unreadable or malformed keeps the keys last read (with a warning)."""

    def __init__(self, keys: KeysFile, path: str | Path | None = None, check_every: float = 0.0):
        self._users = {e.sha256: e.user_id for e in keys.keys}
        self.path, self.check_every = (Path(path) if path else None), check_every
        self._stamp = self._stat()
        self._checked = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, check_every: float = 0.0) -> "KeyRing":
        return cls(read_keys(path), path, check_every)

    def _stat(self):
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _reload(self) -> None:
        now = time.monotonic()
        if self.path is None or now - self._checked < self.check_every:
            return
        with self._lock:
            self._checked = now
            stamp = self._stat()
            if stamp == self._stamp:
                return
            try:
                users = {e.sha256: e.user_id for e in read_keys(self.path).keys}
            except ConfigError as exc:
                warnings.warn(f"{exc}; keeping the {len(self._users)} keys read before", RuntimeWarning, stacklevel=3)
                self._stamp = stamp
                return
            self._users, self._stamp = users, stamp

    def user_for(self, key: str | None) -> str | None:
        self._reload()
        if not key or len(key) > 256:
            return None
        return self._users.get(hash_key(key))

    def __len__(self) -> int:
        return len(self._users)
