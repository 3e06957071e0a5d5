"""Vague references in parameter descriptions (seed semantic-pointer §3.1 step 1, §3.4.1): rules for
Chinese and English pronouns and demonstratives, each mapped to the kind of entity it points at, and
the seed's prompts with a tolerant JSON reader for LLM replies."""
from __future__ import annotations

import json
import re

# reference -> entity kind; the longest match wins ("那笔贷款" before "那")
REFERENCES = {
    "person": ["该用户", "该客户", "这位客户", "那位客户", "这个客户", "那个客户", "这个用户", "那个用户", "此人",
               "该人", "他", "她", "对方", "that customer", "this customer", "the customer", "that client",
               "this client", "the client", "this user", "that user", "the user", "this person", "that person", "he",
               "she", "him", "该借款人", "这位借款人", "那位借款人", "该申请人", "这位申请人", "the borrower",
               "that borrower", "this borrower", "the applicant", "this applicant",
               "her", "his", "their", "them"],
    "order": ["这个订单", "该订单", "那个订单", "这笔订单", "this order", "that order", "the order"],
    "loan": ["那笔贷款", "这笔贷款", "该贷款", "这笔借款", "那笔借款", "this loan", "that loan", "the loan"],
    "collateral": ["该押品", "这个押品", "那个押品", "这件押品", "this collateral", "that collateral",
                   "the collateral"],
    "account": ["该账户", "这个账户", "那个账户", "this account", "that account", "the account"],
    "generic": ["上述", "以上", "前面提到的", "这个", "那个", "它", "the above", "mentioned above", "aforementioned",
                "it", "that one", "this one", "the same"],
}
ENTITY_WORDS = {  # words a memory line about that kind of entity contains
    "person": ["客户", "用户", "先生", "女士", "申请人", "借款人", "customer", "client", "user", "applicant",
               "borrower", "mr", "ms", "mrs"],
    "order": ["订单", "order"],
    "loan": ["贷款", "借款", "loan"],
    "collateral": ["押品", "抵押", "collateral"],
    "account": ["账户", "账号", "account", "accounts"],
    "generic": [],
}
_IDENT = re.compile(r"[A-Za-z]{0,4}[-_]?\d{3,}[\w\-]*")




def _find(text: str, ref: str) -> bool:
    if ref.isascii():
        return re.search(rf"(?<![A-Za-z]){re.escape(ref)}(?![A-Za-z])", text, re.I) is not None
    if len(ref) == 1:  # 他/她/它, not inside 其他/其它
        return re.search(rf"(?<!其){ref}", text) is not None
    return ref in text


def detect_references(text: str) -> list[tuple[str, str]]:
    """[(reference, entity kind)] in `text`, longest references first, none inside another."""
    found: list[tuple[str, str]] = []
    for kind, refs in REFERENCES.items():
        found += [(r, kind) for r in refs if _find(text, r)]
    found.sort(key=lambda x: -len(x[0]))
    out: list[tuple[str, str]] = []
    for ref, kind in found:
        if not any(ref.lower() in kept.lower() for kept, _ in out):
            out.append((ref, kind))
    return out


def has_identifier(text: str) -> bool:
    return _IDENT.search(text) is not None


def loose_json(text: str):
    """The first JSON object or array in an LLM reply (code fences, prose around it, single quotes and
    trailing commas tolerated); None when there is none."""
    text = re.sub(r"```(?:json)?", "", text or "")
    for opener, closer in (("{", "}"), ("[", "]")):
        start = text.find(opener)
        end = text.rfind(closer)
        if start < 0 or end <= start:
            continue
        chunk = text[start:end + 1]
        for candidate in (chunk, re.sub(r",\s*([}\]])", r"\1", chunk.replace("'", '"'))):
            try:
                return json.loads(candidate)
            except json.JSONDecodeError:
                continue
    return None
