"""Dataset loaders into the normalised `Conversation` / `QAItem` form, registered by name (one file
each, discovered) and cached as Hugging Face datasets (`normalized.py`); any file in the normalised
format loads without code (`load_dataset(label, path=...)`)."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.encoders.embedder import weights_digest
from dkilab.eval.data.base import DATA_ENV, DATASETS, DatasetNotFoundError, data_dir, register_dataset
from dkilab.eval.data.fixtures import load_fixtures
from dkilab.eval.data.locomo import load_locomo
from dkilab.eval.data.madial import load_madial, load_madial_en, load_madial_zh
from dkilab.eval.data.memdaily import load_memdaily
from dkilab.eval.data.normalized import cached, fingerprint, read_normalized
from dkilab.eval.data.sessions import by_session, load_locomo_sessions
from dkilab.eval.data.worksessions import load_worksessions

__all__ = ["DATA_ENV", "DatasetNotFoundError", "data_dir", "register_dataset", "load_locomo", "load_fixtures",
           "load_memdaily", "load_worksessions", "load_locomo_sessions", "by_session",
           "load_madial", "load_madial_en", "load_madial_zh", "load_dataset",
           "dataset_info", "resolve_path", "dataset_available", "source_digest", "DATASETS"]


def resolve_path(path: str, data: str | None = None) -> Path:
    """A normalised-format file: absolute, or relative to the data dir, else to the working directory."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        try:
            tries = [data_dir(data) / p, Path.cwd() / p]
        except DatasetNotFoundError:
            tries = [Path.cwd() / p]
        p = next((t for t in tries if t.exists()), tries[0])
    if not p.exists():
        raise DatasetNotFoundError(f"dataset file {p} not found (a path in the normalised format, relative to the "
                                   f"data dir ${DATA_ENV} or absolute; see dkilab/eval/data/normalized.py)")
    return p


def dataset_info(name: str, path: str | None = None) -> dict:
    """What a dataset declares: language, scorer, version. A file in the normalised format: the language its
    records give (`auto` ones detected from their text, as loading does: `file_language`), scorer auto,
    version 1."""
    if path is not None:
        return {"language": file_language(path), "scorer": "auto", "version": "1", "sources": (),
                "description": f"file {path}",
                "preferences": True, "choices": True}  # a normalised file may carry them: not known before it is read
    return DATASETS.meta(name)


def file_language(path: str, data: str | None = None) -> str:
    """A normalised file's language as its conversations give it: en, cn, or mixed when they differ (records
    saying `auto` are detected from their text, once per file version); `auto` when the file cannot be read
    yet (loading it then names the problem)."""
    try:
        p = resolve_path(path, data)
        stamp = stat_key(p)
    except (DatasetNotFoundError, OSError):
        return "auto"
    return _file_language(str(p), stamp)


@functools.lru_cache(maxsize=64)
def _file_language(path: str, stamp: tuple) -> str:
    try:
        languages = {c.language for c in read_normalized(Path(path))}
    except (ValueError, OSError):
        return "auto"
    return languages.pop() if len(languages) == 1 else "mixed" if languages else "auto"


def _source_files(meta: dict, data: str | None) -> list[Path]:
    files: list[Path] = []
    for pattern in meta.get("sources", ()):
        p = Path(pattern)
        if p.is_absolute():
            files += [p] if p.exists() else []
        else:
            try:
                root = data_dir(data)
            except DatasetNotFoundError:
                return []
            files += sorted(root.glob(pattern))
    return files


def source_digest(name: str, path: str | None = None, data: str | None = None) -> str | None:
    """A digest of what the dataset is read from (each source file's name and bytes, by
    encoders.embedder.weights_digest, memoised per size and mtime), so a cell's identity changes when a file is
    edited under the same name; None when the files are not there (bundled in code, or missing: loading then
    says so)."""
    if path is not None:
        try:
            files = [resolve_path(path, data)]
        except DatasetNotFoundError:
            return None
    else:
        files = _source_files(DATASETS.meta(name), data)
    if not files:
        return None
    parts = [weights_digest(str(f)) or "" for f in files]
    return parts[0] if len(parts) == 1 else hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def load_dataset(name: str, data_dir=None, limit: int | None = None, question_limit: int | None = None,
                 path: str | None = None):
    """Conversations of a registered dataset (or of a normalised-format file at `path`), cached."""

    if path is not None:
        src = resolve_path(path, data_dir)

        def build():
            convs = read_normalized(src)[:limit]
            for c in convs:
                c.questions = c.questions[:question_limit]
            return convs

        return cached(f"file-{src.stem}", fingerprint("file", str(src), limit, question_limit, files=[src]), build)
    loader, meta = DATASETS[name], DATASETS.meta(name)
    files = _source_files(meta, data_dir)
    if not files:  # the loader says what is missing and where to get it
        return loader(data_dir, limit=limit, question_limit=question_limit)
    key = fingerprint(name, meta["version"], limit, question_limit, files=files)
    return cached(name, key, lambda: loader(data_dir, limit=limit, question_limit=question_limit))


def dataset_available(name: str, data: str | None = None) -> bool:
    """Whether a registered dataset's source files are there (bundled, or in the data dir)."""
    return bool(_source_files(DATASETS.meta(name), data))
