"""Which questions a cell asks: a dataset spec's selection (split halves, languages, the ablation split, golds the
audit finds wrong, categories, questions that refer back, stratified samples and limits) over its loaded
conversations, each question given its gold evidence sessions. The same spec on the same data selects the same
questions."""
from __future__ import annotations

from dkilab.config import ConfigError
from dkilab.eval.data import dataset_info, load_dataset
from dkilab.eval.data.ablation import ablation_split
from dkilab.eval.data.locomo_audit import wrong_gold_qids
from dkilab.recall.reference import ReferenceResolver, ReferenceType
from dkilab.types import Conversation, QAItem


def stratified(questions: list, k: int | None) -> list:
    """`k` of `questions`, taken round-robin over their kinds (answerable or not x category, in order of first
    appearance) and returned in their original order: a sample of 2 from a conversation with unanswerable
    questions holds one of them."""
    if k is None or k >= len(questions):
        return list(questions)
    strata: dict[tuple, list[int]] = {}
    for i, q in enumerate(questions):
        strata.setdefault((q.answerable, str(q.category)), []).append(i)
    picked: list[int] = []
    queues = list(strata.values())
    while len(picked) < k:
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return [questions[i] for i in sorted(picked)]


def select_questions(d, data_dir) -> tuple[list[Conversation], list[tuple[Conversation, QAItem]]]:
    """(conversations, [(conversation, question)]) of a dataset spec (`DatasetSpec`: the experiment's `datasets:`
    entry), after split, languages, the audit, categories, references, sampling and limits; a selection that
    leaves nothing is refused, naming the entry."""
    convs = d.conversations(data_dir)
    if d.languages is not None:
        found = sorted({c.language for c in convs})
        convs = [c for c in convs if c.language in d.languages]
        if not convs:
            raise ConfigError(f"datasets ({d.key}): languages: {d.languages} matches no conversation "
                              f"(its languages: {', '.join(found) or 'none'})")
    if d.split == "ablation":
        convs = ablation_split(convs)
    wrong: set[str] = set()
    if d.exclude_audited is not None:  # the golds the public audit finds wrong (eval/data/locomo_audit.py)

        wrong = wrong_gold_qids(load_dataset(d.name, data_dir=data_dir), d.audit_path(data_dir))
    cats = None if d.categories is None else {str(c) for c in d.categories}
    refers = _reference_filter() if d.with_reference else None
    out = []
    half = (len(convs) + 1) // 2
    asked = convs[:half] if d.split == "dev" else convs[half:] if d.split == "test" else convs
    for conv in asked:
        qs = [q for q in conv.questions if (cats is None or str(q.category) in cats) and q.qid not in wrong
              and (q.answerable or not d.answerable_only) and (refers is None or refers(q.question))]
        out += [(conv, q) for q in (stratified(qs, d.question_limit) if d.sample == "stratified"
                                    else qs[:d.question_limit])]
    if refers is not None and not out:
        raise ConfigError(
            f"datasets ({d.key}): with_reference: no question of it carries a reference the resolver maps")
    if cats is not None and not out:
        known = sorted({str(q.category) for c in asked for q in c.questions})
        raise ConfigError(f"datasets ({d.key}): categories: {d.categories} matches no question "
                          f"(its categories: {', '.join(known) or 'none'})")
    if not out:  # an empty cell would end FINISHED with nothing measured
        kept = (f"{len(asked)} of {len(convs)} conversations after split {d.split}" if d.split in ("dev", "test")
                else f"{len(convs)} conversations") + (f" from first {d.first}" if d.first else "")
        why = [kept, *(["answerable_only"] if d.answerable_only else []),
               *([f"{len(wrong)} audited golds excluded"] if wrong else [])]
        raise ConfigError(f"datasets ({d.key}): selects no question ({', '.join(why)}); a cell would measure nothing")
    _mark_evidence_sessions(out)

    listed = next((q for _, q in out if q.choices), None)
    if listed is not None and not dataset_info(d.name, d.path).get("choices"):  # CHOOSE would miss the identity
        raise ValueError(f"dataset {d.name!r}: question {listed.qid} has choices, but the dataset is registered "
                         "without choices=True (register_dataset): its cells' identity would miss the CHOOSE prompt")
    return convs, out


def _reference_filter():
    """Whether a question carries a reference the default resolver maps to a scope."""
    resolver = ReferenceResolver()
    return lambda text: resolver.resolve(text).reference_type != ReferenceType.NONE


def _mark_evidence_sessions(items: list) -> None:
    """Each question's gold evidence sessions, for session-level retrieval metrics. It is written to
    the question's metadata, which the harness keeps: a strategy is given only `session_id` and `task`
    (QAItem fields)."""
    sessions: dict[str, dict[str, str]] = {}
    for conv, q in items:
        if q.evidence_ids and "evidence_sessions" not in q.metadata:
            by_id = sessions.setdefault(conv.conversation_id, {m.message_id: m.session_id for m in conv.messages})
            q.metadata["evidence_sessions"] = list(dict.fromkeys(by_id[e] for e in q.evidence_ids if e in by_id))
