"""The public audit of LoCoMo's answer key (Penfield Labs, github.com/dial481/locomo-audit, `audit/errors_conv_*.json`):
per question it lists an error type, and the golds of five types are wrong (a hallucinated fact, a temporal
miscalculation, a speaker misattributed, an ambiguous or an incomplete answer: 99 of the 1,540 questions of
categories 1-4); a wrong citation alone leaves the answer right. `exclude_audited: PATH` on a LoCoMo dataset (the
audit's `audit` folder, or one of its files; absolute or under the data dir) leaves those questions out, and the
dataset's identity records the audit's digest, how many it excluded and the ceiling they left on the full set
(the best score a perfect system gets against the unaudited key). dkilab ships no part of the audit."""
from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.config import ConfigError

SOURCE = "github.com/dial481/locomo-audit (audit/errors_conv_*.json)"
SCORE_CORRUPTING = ("HALLUCINATION", "TEMPORAL_ERROR", "ATTRIBUTION_ERROR", "AMBIGUOUS", "INCOMPLETE")
CITATION_ONLY = ("WRONG_CITATION",)
_ID = re.compile(r"^locomo_(\d+)_qa(\d+)$")


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(path.glob("errors_conv_*.json"))
        if not found:
            raise ConfigError(
                f"exclude_audited: {path} holds no errors_conv_*.json (the audit's `audit` folder: {SOURCE})")
        return found
    if path.is_file():
        return [path]
    raise ConfigError(f"exclude_audited: {path} does not exist (the audit's `audit` folder: {SOURCE})")


@functools.lru_cache(maxsize=4)
def _read(files: tuple[str, ...], stamps: tuple[tuple, ...]) -> tuple[dict[tuple[int, int], tuple[str, str, str]],
                                                                     str]:
    entries_of: dict[tuple[int, int], tuple[str, str, str]] = {}
    digest = hashlib.sha1()
    for name in files:
        try:
            entries = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"exclude_audited: {name}: not readable as JSON ({exc})") from None
        if not isinstance(entries, list):
            raise ConfigError(f"exclude_audited: {name}: expected a list of the audit's entries")
        for k, e in enumerate(entries):
            qid, kind = (e.get("question_id"), e.get("error_type")) if isinstance(e, dict) else (None, None)
            m = _ID.match(str(qid))
            if m is None or kind not in SCORE_CORRUPTING + CITATION_ONLY:
                raise ConfigError(f"exclude_audited: {name}: entry {k} ({qid!r}): needs question_id locomo_<c>_qa<i> "
                                  f"and an error_type of {', '.join(SCORE_CORRUPTING + CITATION_ONLY)}, got {kind!r}")
            entries_of[(int(m.group(1)), int(m.group(2)))] = (str(e.get("question", "")),
                                                                str(e.get("golden_answer", "")), kind)
            if kind in SCORE_CORRUPTING:
                digest.update(f"{qid}\t{kind}\n".encode())
    return entries_of, digest.hexdigest()[:12]


def audit_entries(path: str | Path) -> tuple[dict[tuple[int, int], tuple[str, str, str]], str]:
    """{(conversation index, question index): (the audit's question text, its golden answer, error type)} of every
    entry, wrong citations included, and the digest of the wrong golds."""
    files = _files(Path(path).expanduser())
    return _read(tuple(str(f.resolve()) for f in files), tuple(stat_key(f) for f in files))


def load_audit(path: str | Path) -> tuple[dict[tuple[int, int], str], str]:
    """{(conversation index, question index): the audit's question text} of the wrong golds, and the digest."""
    entries, digest = audit_entries(path)
    return {k: text for k, (text, _, kind) in entries.items() if kind in SCORE_CORRUPTING}, digest


def wrong_gold_qids(conversations: list, path: str | Path) -> set[str]:
    """The dkilab question ids (`<sample id>:q<i>`) of the audit's wrong golds, in the full LoCoMo conversation
    list (loader order); an audit question that is not the dataset's at that place is refused, naming it."""
    folder = Path(path).expanduser()
    if folder.is_dir():  # one file per conversation: a folder short of one would quietly exclude fewer golds
        missing = [f"errors_conv_{c}.json" for c in range(len(conversations))
                   if not (folder / f"errors_conv_{c}.json").is_file()]
        if missing:
            raise ConfigError(f"exclude_audited: {folder} lacks {', '.join(missing)} (the audit has one file per "
                              "LoCoMo conversation; name one file to use only that conversation's)")
    entries, _ = audit_entries(path)
    out = set()
    for (c, i), (text, gold, kind) in sorted(entries.items()):  # every entry checked, wrong citations too
        if c >= len(conversations) or i >= len(conversations[c].questions):
            raise ConfigError(f"exclude_audited: locomo_{c}_qa{i} is not a question of this LoCoMo file")
        q = conversations[c].questions[i]
        if _same(text) != _same(q.question):
            raise ConfigError(f"exclude_audited: locomo_{c}_qa{i} is {text!r} in the audit but {q.question!r} here: "
                              "another version of the data")
        if _same(gold) != _same(q.answer):
            raise ConfigError(f"exclude_audited: locomo_{c}_qa{i}'s golden_answer is {gold!r} in the audit but "
                              f"{q.answer!r} here: another version of the data")
        if kind in SCORE_CORRUPTING:
            out.add(str(q.qid))
    return out


def _same(text) -> str:
    return " ".join(str(text if text is not None else "").split())


def audit_info(conversations: list, path: str | Path) -> dict:
    """What a dataset's identity records of the exclusion: source, digest, golds excluded, and the ceiling they
    leave on the answerable questions of the full set."""
    wrong, digest = load_audit(path)
    answerable = sum(q.answerable for c in conversations for q in c.questions)
    excluded = len(wrong_gold_qids(conversations, path))
    return {"source": SOURCE, "sha1": digest, "excluded": excluded,
            "ceiling_before": round(1 - excluded / answerable, 4) if answerable else None}
