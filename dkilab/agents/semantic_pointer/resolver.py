"""TreeContextResolver (seed semantic-pointer §3.3.2): vague parameter descriptions -> self-contained
semantic pointers from the ancestors' memories.

Detection: the rules of `refs` (or the §3.4.1 LLM prompt, as an option). Synthesis: the §3.4.2 LLM
prompt with tolerant JSON parsing, or the rule composer (ancestor task goals and entity facts) when
no LLM is configured or its reply is unusable (counted). Below `min_confidence_threshold` the
original description is kept (§3.5). Pointers are cached for `cache_ttl_seconds`, keyed by the
store, user, tree, agent, parameter, description, task context and the user's memory state.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cachetools import TTLCache
from pydantic import BaseModel, ConfigDict, Field

from dkilab.agents.semantic_pointer.memory import TreeMemory, shares_word
from dkilab.agents.semantic_pointer.refs import ENTITY_WORDS, detect_references, has_identifier, loose_json
from dkilab.agents.semantic_pointer.tree import AgentTree
from dkilab.prompts import POINTER_DETECT_PROMPT as DETECT_PROMPT
from dkilab.prompts import POINTER_SYNTH_PROMPT as SYNTH_PROMPT
from dkilab.text.lang import has_cjk
from dkilab.text.segment import content_tokens
from dkilab.tracing import span

_LINE = re.compile(r"[^。！？!?\n;；]+[。！？!?;；]?")
_SURNAMES = ("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁任沈姚"
             "卢姜崔钟谭陆汪范金石廖贾夏韦方白邹孟熊秦邱江尹薛段雷侯龙史陶黎贺顾毛郝龚邵万钱严武戴莫孔汤")
_NAMED = re.compile(rf"(?:客户|用户|申请人|借款人)[：:\s]?[{_SURNAMES}][\u4e00-\u9fff]{{1,2}}|"
                    fr"[{_SURNAMES}][\u4e00-\u9fff]?(?:先生|女士)|(?:customer|client|applicant|borrower|Mr\.?|Ms\.?|"
                    r"Mrs\.?)\s+[A-Z][a-z]+")
_DEFINITE = re.compile(r"第[一二三四五六七八九十\d]+[个位笔单件]|昨天|今天|前天|上周|本周|刚才|上午|下午|当前|这位|"
                       r"那位|这笔|那笔|\b(?:first|second|third|last|yesterday|today|this morning|last week|current|"
                       r"who)\b",
                       re.I)
_ROLE = re.compile(r"^\s*(?:user|assistant|system)\s*:\s*")
_PREFIX = re.compile(r"^\s*(?:任务目标|目标|task goal|goal|core memory)\s*[:：]\s*", re.I)


class SemanticPointerConfig(BaseModel):
    """SEMANTIC_POINTER_CONFIG of seed §3.5."""
    model_config = ConfigDict(extra="forbid")
    max_ancestor_levels: int = Field(3, ge=1, le=10)
    min_confidence_threshold: float = Field(0.6, ge=0.0, le=1.0)
    enable_ambiguity_detection: bool = True
    fallback_to_original: bool = True
    cache_ttl_seconds: float = Field(300.0, ge=0.0)
    detect_with_llm: bool = False  # §3.4.1 prompt instead of the rules (needs an llm)


@dataclass
class SemanticPointer:
    """Seed §3.2.1."""
    param_name: str
    original_desc: str
    resolved_desc: str
    source_agent_path: list[str]
    confidence: float
    resolution_chain: list[str] = field(default_factory=list)
    method: str = "rule"  # rule | llm | fallback
    # not resolved because no referent could be singled out: two at the nearest level that names one (rules),
    # or the model's own decision to keep the original description (method llm)
    ambiguous: bool = False

    @property
    def fell_back(self) -> bool:
        return self.resolved_desc == self.original_desc


def inject(enriched_context: dict, pointers: dict[str, SemanticPointer]) -> dict:
    """Seed §3.3.3: `enriched_context["__semantic_pointer__{param}"] = pointer`."""
    for name, pointer in pointers.items():
        enriched_context[f"__semantic_pointer__{name}"] = pointer
    return enriched_context


def _context_text(current_context: dict[str, Any]) -> str:
    return " ".join(str(v) for k, v in (current_context or {}).items()
                    if isinstance(v, str) and not k.startswith("__semantic_pointer__"))


class TreeContextResolver:
    def __init__(self, memory: TreeMemory, tree: AgentTree, config: SemanticPointerConfig | dict | None = None,
                 llm: Callable[[str], str] | None = None, clock: Callable[[], float] = time.monotonic):
        self.memory, self.tree, self.llm, self.clock = memory, tree, llm, clock
        self.config = SemanticPointerConfig.model_validate(config or {})

        # entries expire after cache_ttl_seconds on the resolver's clock; the least recently used goes first when full
        self._cache: TTLCache[tuple, SemanticPointer] = TTLCache(maxsize=1024, ttl=self.config.cache_ttl_seconds,
                                                                 timer=clock)
        self.stats = {"resolved": 0, "cache_hits": 0, "llm_calls": 0, "llm_fallbacks": 0}

    # --- the public call -----------------------------------------------------------------------
    def resolve_semantic_pointers(self, param_descriptions: dict[str, str], current_context: dict[str, Any],
                                  agent_id: str, user_id: str) -> dict[str, SemanticPointer]:
        """A pointer for every parameter whose description holds a vague reference."""
        out = {}
        for name, desc in param_descriptions.items():
            if self.config.enable_ambiguity_detection and not self._detect_ambiguous_references(desc):
                continue
            key = (self.memory.source(user_id), user_id, self.tree.version,
                   agent_id, name, desc, json.dumps(current_context, sort_keys=True, default=str, ensure_ascii=False),
                   self.memory.version(user_id))
            hit = self._cache.get(key)
            if hit is not None:
                self.stats["cache_hits"] += 1
                out[name] = hit
                continue
            with span("semantic_pointer", param=name, description=desc, agent=agent_id) as trace:
                query = self._query(desc, current_context)
                ancestors = self.memory.get_ancestor_context(user_id, agent_id, self.tree,
                                                             self.config.max_ancestor_levels, query)
                pointer = self._synthesize_semantic_pointer(name, desc, ancestors, current_context)
                trace.update(resolved=pointer.resolved_desc, confidence=pointer.confidence, method=pointer.method)
            self.stats["resolved"] += 1
            self._cache[key] = pointer
            out[name] = pointer
        return out

    def _query(self, desc: str, current_context: dict) -> str:
        kinds = {k for _, k in detect_references(desc)} or {"generic"}
        words = [w for k in kinds for w in ENTITY_WORDS[k]]
        return " ".join([*words, *content_tokens(desc + " " + _context_text(current_context))])

    # --- detection ---------------------------------------------------------------------------
    def _detect_ambiguous_references(self, text: str) -> list[str]:
        if self.config.detect_with_llm and self.llm is not None:
            self.stats["llm_calls"] += 1
            found = loose_json(self.llm(DETECT_PROMPT.format(text=text)))
            if isinstance(found, list) and all(isinstance(x, str) for x in found):
                return [x for x in found if x and x in text]
            self.stats["llm_fallbacks"] += 1
        return [ref for ref, _ in detect_references(text)]

    # --- synthesis ---------------------------------------------------------------------------
    def _synthesize_semantic_pointer(self, param_name: str, original_desc: str, ancestor_contexts: list[dict],
                                     current_context: dict[str, Any]) -> SemanticPointer:
        """With a model, the model aligns and resolves pronoun ambiguity itself (seed §3.1 step 3, the §3.4.2
        prompt): a reply that keeps the original description, or below the confidence threshold, is its
        decision not to pick a referent (`ambiguous`, method `llm`). Without one, or when its reply is unusable,
        the rules decide: two referents at the nearest level that names one keep the original (§3.5)."""
        if self.llm is not None:
            pointer = self._llm_pointer(param_name, original_desc, ancestor_contexts, current_context)
            if pointer is not None:
                low = pointer.confidence < self.config.min_confidence_threshold
                if pointer.fell_back or (low and self.config.fallback_to_original):
                    chain = [*pointer.resolution_chain, "the model kept the original description "
                             f"(confidence {pointer.confidence:.2f})"]
                    return SemanticPointer(param_name, original_desc, original_desc, [], pointer.confidence, chain,
                                           "llm", ambiguous=True)
                return pointer
        if self.config.enable_ambiguity_detection:
            rivals = ambiguity(original_desc, ancestor_contexts, current_context)
            if rivals is not None:  # the composer may not pick one of two referents: keep the original (§3.5)
                level, agent, names = rivals
                chain = [f"level {level} ({agent}): two candidate referents, {' / '.join(names)}; the task does not "
                         "say which", "kept the original description (ambiguous)"]
                return SemanticPointer(param_name, original_desc, original_desc, [], AMBIGUOUS_CONFIDENCE, chain,
                                       "fallback", ambiguous=True)
        pointer = compose_pointer(param_name, original_desc, ancestor_contexts, current_context)
        if pointer.confidence < self.config.min_confidence_threshold and self.config.fallback_to_original:
            chain = [*pointer.resolution_chain, f"kept the original description (confidence {pointer.confidence:.2f})"]
            return SemanticPointer(param_name, original_desc, original_desc, [], pointer.confidence, chain, "fallback")
        return pointer

    def _llm_pointer(self, param_name, original_desc, ancestors, current_context) -> SemanticPointer | None:
        if self.llm is None:
            return None
        self.stats["llm_calls"] += 1
        text = "\n\n".join(f"[父级{a['level']} {a['agent_id']}] {a['agent_description']}\n{a['core_memory']}\n"
                           f"{a['conversation_history']}".strip() for a in ancestors) or "（无）"
        reply = self.llm(SYNTH_PROMPT.format(param_name=param_name, original_desc=original_desc,
                                             current_context=json.dumps(
                                                 current_context, ensure_ascii=False, default=str),
                                             ancestor_contexts=text))
        data = loose_json(reply)
        try:
            desc, conf = data["resolved_desc"], float(data.get("confidence", 0.0))
            chain = [str(x) for x in data.get("resolution_chain", [])]
            if not isinstance(desc, str) or not desc.strip() or not 0.0 <= conf <= 1.0:
                raise ValueError("bad fields")
        except (TypeError, KeyError, ValueError, AttributeError):
            self.stats["llm_fallbacks"] += 1
            return None
        return SemanticPointer(param_name, original_desc, desc.strip(), [a["agent_id"] for a in ancestors], conf,
                               chain, "llm")


AMBIGUOUS_CONFIDENCE = 0.3  # below any sensible min_confidence_threshold
_ENTITY_ID = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{1,4}[-_]?\d{3,}[A-Za-z0-9\-]*")
_NAME = re.compile(rf"(?:客户|用户|申请人|借款人)[：:\s]?([{_SURNAMES}][\u4e00-\u9fff]{{1,2}})|"
                   fr"([{_SURNAMES}][\u4e00-\u9fff]?)(?:先生|女士)|(?:customer|client|applicant|borrower|Mr\.?|Ms\.?|"
                   r"Mrs\.?)\s+([A-Z][a-z]+)")


def entities(line: str) -> tuple[set[str], set[str]]:
    """(identifiers, names) a line names: C-1029, L-20250418 (a letter prefix: amounts such as 200 or 8,000
    are not identifiers); 张伟 after 客户, Mr Smith."""
    names = {next(g for g in m.groups() if g) for m in _NAME.finditer(line)}
    return set(_ENTITY_ID.findall(line)), names


def _referents(lines: list[str]) -> int:
    """How many distinct entities the lines name: identifiers and names counted apart (a name with its id is one)."""
    ids = set().union(*(entities(ln)[0] for ln in lines)) if lines else set()
    names = set().union(*(entities(ln)[1] for ln in lines)) if lines else set()
    return max(len(ids), len(names))


def _about(ln: str, entity_words: set[str]) -> bool:
    return shares_word(ln, entity_words) if entity_words else has_identifier(ln)


def ambiguity(original_desc: str, ancestors: list[dict], current_context: dict[str, Any]
              ) -> tuple[int, str, list[str]] | None:
    """(level, agent, the rival lines) when the nearest level that names a referent of the described kind
    names two or more and the task words do not single one out; None otherwise."""
    kinds = {k for _, k in detect_references(original_desc)} or {"generic"}
    entity_words = {w for k in kinds for w in ENTITY_WORDS[k]}
    task_words = set(content_tokens(original_desc + " " + _context_text(current_context)))
    for ctx in ancestors:
        lines = [ln for ln in _lines(ctx) if _about(ln, entity_words) and named(ln)]
        if not lines:
            continue
        if _referents(lines) < 2:
            return None
        overlap = {ln: sum(shares_word(ln, {w}) for w in task_words) for ln in lines}
        top = max(overlap.values())
        best = [ln for ln in lines if overlap[ln] == top]
        if top > 0 and len(best) == 1 and _referents(best) == 1:
            return None  # the task's own words pick one line naming one entity
        return ctx["level"], ctx["agent_id"], lines[:3]
    return None


def _lines(ctx: dict) -> list[str]:
    text = "\n".join(x for x in (ctx["agent_description"], ctx["core_memory"], ctx["conversation_history"]) if x)
    return [_PREFIX.sub("", _ROLE.sub("", s)).strip(" 。.;；") for s in _LINE.findall(text) if s.strip()]


def named(line: str) -> bool:
    """Whether a line names its entity: an identifier, or a name after 客户/customer/Mr ..."""
    return has_identifier(line) or _NAMED.search(line) is not None


def referent(line: str) -> int:
    """2: the line names its entity; 1: it describes one definitely (昨天第二个客户, the customer who ...);
    0: it only mentions the kind ("客户服务总调度"), which resolves nothing."""
    return 2 if named(line) else 1 if _DEFINITE.search(line) else 0


def compose_pointer(param_name: str, original_desc: str, ancestors: list[dict],
                    current_context: dict[str, Any]) -> SemanticPointer:
    """The rule composer: among the ancestor lines about the referenced kind of entity, the nearest one
    that names it (else the nearest one at all) becomes the referent, words shared with the task
    breaking ties; confidence falls with the distance and when the referent is not named."""
    refs = detect_references(original_desc)
    kinds = {k for _, k in refs} or {"generic"}
    entity_words = {w for k in kinds for w in ENTITY_WORDS[k]}
    task_words = set(content_tokens(original_desc + " " + _context_text(current_context)))
    found = []  # (ctx, line) nearest level first, lines that name or describe a referent
    for ctx in ancestors:
        lines = [ln for ln in _lines(ctx) if (shares_word(ln, entity_words) if entity_words else has_identifier(ln))
                 and referent(ln)]
        found += [(ctx, ln) for ln in sorted(lines, key=lambda ln: -sum(shares_word(ln, {w}) for w in task_words))]
    if not found:
        return SemanticPointer(param_name, original_desc, original_desc, [], 0.0,
                               ["no ancestor memory names or describes the referent"], "rule")
    ctx, best = next(((c, ln) for c, ln in found if referent(ln) == 2), found[0])
    conf = {1: 0.9, 2: 0.8, 3: 0.7}.get(ctx["level"], 0.65) - (0.0 if referent(best) == 2 else 0.1)
    ref = refs[0][0] if refs else ""
    added = supporting_lines(best, ctx, ancestors)
    cn = has_cjk(original_desc)
    what = best + "".join(f"{'；' if cn else '; '}{ln}" for _, ln in added)
    resolved = (f"{original_desc}（{ref + '指' if ref else '指'}：{what}）" if cn
                else f"{original_desc} ({ref + ' = ' if ref else 'refers to: '}{what})")
    deepest = max([ancestors.index(ctx), *(ancestors.index(c) for c, _ in added)])
    path = [a["agent_id"] for a in ancestors[:deepest + 1]]
    chain = [f"level {ctx['level']} ({ctx['agent_id']}) named the referent: {best}"]
    chain += [f"level {c['level']} ({c['agent_id']}) added: {ln}" for c, ln in added]
    return SemanticPointer(param_name, original_desc, resolved, path, round(conf, 2), chain, "rule")


def supporting_lines(best: str, ctx: dict, ancestors: list[dict], limit: int = 2) -> list[tuple[dict, str]]:
    """Facts about the same referent from the other levels (seed §3.3: each level completes the picture): a
    line that mentions one of the referent's identifiers or names and names no other person. Nearest level
    first, one line per level."""
    ids, names = entities(best)
    mine = ids | names
    out = []
    for other in ancestors:
        if other is ctx:
            continue
        for ln in _lines(other):
            o_ids, o_names = entities(ln)
            if ln != best and any(e in ln for e in mine) and not (o_names - names):
                out.append((other, ln))
                break  # one line per level
        if len(out) >= limit:
            break
    return out
