"""Conflicts and their adjudication (seed recall-agent §4.4 context check, §4.6).

Two candidates of one hypothesis conflict when they share a term (or fill one slot: where one lives, works, the car
one drives, the editor one codes in; or, announcing a change, what pet one has) and disagree: opposite polarity
("I love spicy food" / "I can't eat spicy food anymore"), the newer one announces a change
("现在…", "moved to"), or the newer one hedges about what the older one states as a constraint
("我对花生严重过敏" / "最近好像对花生没那么敏感了吧"). Adjudication, in the seed's order of attribution (§4.6.2):
  context  - one side is hypothetical, retracted or about someone else -> the other wins;
  source   - the user's own words beat the assistant's paraphrase;
  unresolved - both sides only hedge -> keep both, marked uncertain;
  weaker_later - the later statement hedges or is less explicit than the earlier one ("我对海鲜过敏，绝对不能吃"
             then "我现在好像也许可以吃点海鲜了吧") -> keep both, marked uncertain; the conflict stays open for a
             follow-up search for a clearer statement (§4.6.1), which, if explicit, then wins on time;
  equally_explicit - as explicit, with no change announced -> keep both, marked uncertain (a conflict);
  time     - the later statement is more explicit, or as explicit and announces a change -> it wins
             ("更晚、更明确的表述优先").
"""
from __future__ import annotations

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.state import AgentState, Candidate, Conflict
from dkilab.types import Message

RETRACTIONS = ["开玩笑", "说错了", "不对不对", "搞错了", "just kidding", "i was joking", "scratch that", "i misspoke",
               "that was wrong"]
GENERIC = {"吃", "喝", "菜", "饮食", "口味", "外卖", "餐厅", "food", "eat", "drink", "diet", "dish", "menu", "工作",
           "work",
           "job", "住", "live"}  # too general for two statements sharing them to be about the same thing
SLOTS = [  # mutually exclusive facts: two statements filling one slot conflict even without negation
    ["住在", "搬到", "搬去", "live in", "lives in", "living in", "moved to", "move to", "moving to"],
    ["在公司", "上班", "入职", "跳槽", "work at", "works at", "work as", "job at", "new job", "joined"],
    ["开的是", "开一辆", "drive a", "drives a", "my car", *cues.VEHICLES],  # the car one drives
    cues.EDITORS,  # the editor one writes code in
]
# what one has, of which one may have several: two statements about it conflict when the newer announces a change
# ("I have a cat named Luna" / "Luna passed away, now I have a dog"), with no shared word needed
CHANGE_SLOTS = [["猫", "狗", "宠物", "cat", "dog", "pet", "puppy", "kitten"]]


def context_flag(c: Candidate, window: list[Message]) -> str | None:
    """§4.4 context: 'hypothetical' when the statement or the turn it answers is conditional,
    'retracted' when the user takes it back right after, else None."""
    if cues.has_cue(c.statement, cues.HYPOTHETICAL):
        return "hypothetical"
    ids = [m.message_id for m in window]
    if c.message.message_id not in ids:
        return None
    i = ids.index(c.message.message_id)
    before = window[i - 1] if i > 0 else None
    if before is not None and before.role != c.message.role and cues.has_cue(before.content, cues.HYPOTHETICAL):
        return "hypothetical"
    for m in window[i + 1:i + 3]:
        if m.role == c.message.role and cues.has_cue(m.content, RETRACTIONS):
            return "retracted"
    return None


def _slot(text: str, slots=SLOTS) -> int | None:
    return next((i for i, s in enumerate(slots) if cues.has_cue(text, s)), None)


def _same_slot(a: Candidate, b: Candidate) -> bool:
    """Both fill one mutually exclusive slot, or one slot of what one has while the newer announces a change."""
    slot = _slot(a.statement)
    if slot is not None and slot == _slot(b.statement):
        return True
    slot = _slot(a.statement, CHANGE_SLOTS)
    return slot is not None and b.changed and slot == _slot(b.statement, CHANGE_SLOTS)


def find_conflicts(candidates: list[Candidate]) -> list[Conflict]:
    """Pairs (older, newer) of one hypothesis that disagree on a shared term or fill the same slot."""
    out = []
    ordered = sorted(candidates, key=lambda c: (c.message.timestamp, c.message.turn_id))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if a.hypothesis != b.hypothesis:
                continue
            shared = [t for t in a.matched if t in b.matched and t not in GENERIC]
            same_slot = _same_slot(a, b)
            disagree = (a.negated != b.negated or (b.changed and not a.changed) or (a.hedged and b.hedged)
                        or (a.explicit_constraint and cues.hedges(b.statement) > 0))  # a hedge against a constraint
            if (shared and disagree) or same_slot:
                out.append(Conflict(a.message.message_id, b.message.message_id, shared or a.matched[:2]))
    return out


def weaker_later(older: Candidate, newer: Candidate) -> bool:
    """The newer statement may not supersede the older (§4.6.2 "更晚、更明确的表述优先"): it carries an
    epistemic hedge (可能, 好像, maybe, I guess), or it is less explicit. A closing 吧 alone lowers explicitness
    but is no veto: it also softens a request ("以后用中文回复我吧")."""
    return cues.count_cues(newer.statement, cues.EPISTEMIC) > 0 or newer.explicitness < older.explicitness


def equally_explicit(older: Candidate, newer: Candidate) -> bool:
    """As explicit as the older statement and announcing no change ("现在…", "moved to"): a contradiction
    that time alone does not settle, shown with both sides. A stated change is the seed's 时间变化."""
    return newer.explicitness == older.explicitness and not newer.changed


def adjudicate(state: AgentState) -> list[Conflict]:
    """Decide every conflict (§4.6.2-4.6.3): sets `winner` (None when unresolved) and `reason`."""
    for x in state.conflicts:
        a, b = state.candidates[x.older], state.candidates[x.newer]
        if a.flag or b.flag:
            x.winner, x.reason = (x.newer if a.flag else x.older), "context"
        elif a.message.role != b.message.role:
            x.winner, x.reason = (x.older if a.message.role == "user" else x.newer), "source"
        elif a.hedged and b.hedged:
            x.winner, x.reason = None, "unresolved"
        elif weaker_later(a, b):
            x.winner, x.reason = None, "weaker_later"
        elif equally_explicit(a, b):
            x.winner, x.reason = None, "equally_explicit"
        else:
            x.winner, x.reason = x.newer, "time"
    return state.conflicts
