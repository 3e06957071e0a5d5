"""Cue lexicons of the rule policy (no LLM): what kind of memory a question asks about, its topic terms,
time and role signals, and the markers conflict adjudication reads (change over time, hedges,
hypotheticals, third parties). Chinese cues are matched as substrings, English cues as words."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from dkilab.memory.view import TimeRange

KIND_CUES = {
    "constraints": ["不能", "不要", "别给", "禁止", "必须", "一定要", "过敏", "忌口", "避免", "千万别", "不许",
                    "不可以", "要求", "忌讳", "限制", "不放", "别放", "requirement",
                    "can't", "cannot", "must", "never", "avoid", "allergic", "allergy", "allergies", "forbidden",
                    "not allowed", "restriction", "rule", "rules", "leave out", "exclude", "omit"],
    "preferences": ["喜欢", "爱吃", "爱喝", "偏好", "口味", "喜好", "格式", "风格", "更愿意", "最爱", "讨厌", "饮食",
                    "习惯", "prefer", "preference", "preferences", "like", "likes", "love", "favorite", "favourite",
                    "enjoy", "hate", "dislike", "taste", "style", "format", "diet", "habit", "habits"],
    "profile": ["工作", "职业", "住在", "住哪", "公司", "老家", "年龄", "几岁", "学校", "专业", "名字", "叫什么",
                "背景", "家人", "上司", "同事", "朋友", "孩子", "宠物", "job", "work", "works", "live", "lives",
                "occupation", "company", "name", "age", "hometown", "background", "profession", "family", "pet",
                "pets"],
}
TOPICS = [  # a question touching one term pulls in the whole list as evidence terms (synonyms, §4.1)
    ["饮食", "吃", "辣", "菜", "素", "肉", "海鲜", "甜", "咖啡", "茶", "酒", "过敏", "忌口", "口味", "花生", "牛奶",
     "乳糖", "外卖", "点菜", "餐厅", "food", "eat", "spicy", "vegetarian", "vegan", "meat", "seafood", "coffee", "tea",
     "allergic", "dessert", "sugar", "dish", "cuisine", "diet", "dietary", "peanut", "milk", "dairy", "lactose",
     "gluten", "drink", "alcohol", "restaurant", "dinner", "lunch", "menu", "snack", "鸡肉", "牛肉", "猪肉", "鱼",
     "chicken", "beef", "pork", "fish"],
    ["格式", "要点", "表格", "列表", "结论", "双语", "简洁", "详细", "总结", "markdown", "bullet", "table", "summary",
     "summaries", "summarise", "summarize", "format", "concise", "brief", "bilingual", "style", "length", "emoji"],
    ["日程", "会议", "截止", "预约", "安排", "提醒", "待办", "ddl", "meeting", "deadline", "appointment", "schedule",
     "reminder", "todo", "to-do", "plan", "plans"],
    ["工作", "公司", "职业", "上班", "同事", "项目", "岗位", "老板", "银行", "风控", "工程师", "老师", "医生", "护士",
     "律师", "程序员", "设计师", "会计", "job", "work", "works", "company", "office", "colleague", "project",
     "engineer", "teacher", "nurse", "doctor", "lawyer", "developer", "designer", "accountant", "bank",
     "profession", "occupation", "boss"],
    ["住", "搬", "城市", "老家", "家乡", "live", "lives", "lived", "moved", "move", "city", "hometown", "apartment"],
    ["语言", "中文", "英文", "英语", "回复", "language", "english", "chinese", "reply", "replies", "answer"],
    ["作息", "睡", "起床", "早起", "熬夜", "sleep", "wake", "morning", "night", "bedtime"],
    ["运动", "跑步", "健身", "游泳", "瑜伽", "exercise", "run", "running", "gym", "swim", "swimming", "yoga", "sport"],
    ["猫", "狗", "宠物", "cat", "cats", "dog", "dogs", "pet", "pets"],
    ["车", "汽车", "开车", *(VEHICLES := ["丰田", "本田", "特斯拉", "宝马", "奔驰", "大众", "比亚迪", "奥迪", "蔚来",
                                         "小鹏", "toyota", "honda", "tesla", "bmw", "mercedes", "volkswagen", "audi",
                                         "ford", "byd", "subaru", "kia", "hyundai", "volvo", "nissan"]),
     "car", "cars", "drive", "vehicle"],
    ["编辑器", "写代码", *(EDITORS := ["vim", "neovim", "emacs", "vs code", "vscode", "pycharm", "intellij", "sublime",
                                     "cursor", "xcode"]), "editor", "ide", "code in", "coding"],
    ["旅行", "出差", "飞机", "航班", "机票", "高铁", "座位", "酒店", "travel", "flight", "flights", "ticket", "seat",
     "train", "hotel", "trip"],
]
QUESTION_WORDS = {"记得", "记不记得", "还记得", "知道", "什么", "哪些", "哪里", "是不是", "有没有", "说过", "提过",
                  "吗", "呢", "一下", "告诉", "我", "你", "我们", "remember", "recall", "know", "what", "which", "did",
                  "do", "does", "tell", "mention", "mentioned", "say", "said", "i", "me", "my", "you", "your", "about"}
ASSISTANT_CUES = ["你说过", "你答应", "你建议", "你推荐", "你承诺", "助手", "you said", "you promised", "you suggested",
                  "you recommended", "you told me"]
TIMELINE_CUES = ["日程", "待办", "要办", "安排", "最近有什么", "schedule", "to-do", "todo", "upcoming", "plans",
                 "agenda"]
EXACT_CUES = ["是不是说过", "有没有说过", "有没有提过", "是不是提过", "did i say", "did i mention", "did i tell",
              "have i said", "have i mentioned"]
WINDOWS = [  # (label, days, cues): §4.2(1)
    ("short", 7, ["刚才", "这两天", "最近", "这周", "本周", "今天", "昨天", "just now", "this week", "recently",
                  "lately", "these days", "today", "yesterday"]),
    ("medium", 30, ["上次", "之前", "以前提到", "我们聊过", "last time", "before", "earlier", "previously",
                    "we talked"]),
    ("long", 180, ["一直", "习惯", "从小", "多年", "长期", "向来", "always", "usually", "habit", "for years",
                   "long-term", "since childhood"]),
]
LADDER = [7, 30, 180, None]  # widening steps in days (None: all time)
NEGATIONS = ["不", "没", "别", "非", "无", "never", "not", "no", "don't", "doesn't", "didn't", "can't", "cannot",
             "won't", "nor", "quit", "stopped"]
CHANGE = ["现在", "开始", "不再", "已经不", "改成", "换成", "换了", "卖了", "卖掉", "改用", "搬到", "戒了", "以后",
          "从今天起", "如今", "now", "no longer", "anymore", "switched", "moved", "these days", "started", "quit",
          "from now on", "changed", "stopped", "sold", "replaced", "got rid of", "traded in", "gave away", "去世",
          "passed away", "died"]
HEDGES = ["可能", "也许", "大概", "好像", "有时", "偶尔", "说不定", "不确定", "maybe", "perhaps", "might", "sometimes",
          "not sure", "probably", "occasionally"]
HYPOTHETICAL = ["如果", "假如", "要是", "假设", "开玩笑", "比如说", "if ", "suppose", "imagine", "joking",
                "hypothetically", "what if"]
THIRD_PARTY = ["我朋友", "我同事", "我妈", "我爸", "我老婆", "我老公", "我姐", "我哥", "我弟", "我妹", "我女儿",
               "我儿子", "他", "她", "my friend", "my wife", "my husband", "my sister", "my brother", "my mom",
               "my mother", "my dad", "my father", "my colleague", "my son", "my daughter", " he ", " she "]
REQUEST_STARTS = ["帮我", "请帮", "请你", "给我", "提醒我", "麻烦", "你帮", "can you", "could you", "would you",
                  "please", "book", "find", "order", "remind", "help", "draft", "write", "translate", "set", "check",
                  "plan", "summarise", "summarize", "make", "explain", "convert", "suggest", "any ideas"]
STANDING = ["以后", "从现在", "每次", "总是", "from now on", "always", "never", "whenever", "every time"]
_EN_WORD = re.compile(r"[a-z][a-z'\-]*")
_DAY = re.compile(r"(\d{4})[年\-/.](\d{1,2})[月\-/.](\d{1,2})日?")
_MONTH = re.compile(r"(\d{4})年(\d{1,2})月")
_MONTHS = "january february march april may june july august september october november december".split()
_EN_DATE = re.compile(r"\b(?:(\d{1,2})\s+)?(" + "|".join(_MONTHS) + r")(?:\s+(\d{1,2}))?,?\s+(\d{4})\b")


@lru_cache(maxsize=256)
def _compiled(cues: tuple[str, ...]) -> tuple[re.Pattern | None, tuple[str, ...]]:
    ascii_ = [c.strip() for c in cues if c.isascii()]
    pattern = re.compile(r"(?<![a-z'])(?:" + "|".join(re.escape(c) for c in sorted(ascii_, key=len, reverse=True))
                         + r")(?:e?s)?(?![a-z'])") if ascii_ else None  # a plural matches its cue: peanut(s)
    return pattern, tuple(c for c in cues if not c.isascii())


def has_cue(text: str, cues) -> str | None:
    """A cue found in `text` (Chinese as substrings, English on word boundaries), else None."""
    pattern, cjk = _compiled(tuple(cues))
    for cue in cjk:
        if cue in text:
            return cue
    if pattern is not None and (m := pattern.search(text.lower())):
        return m.group(0)
    return None


def count_cues(text: str, cues) -> int:
    return sum(1 for c in cues if has_cue(text, [c]))


def topic_terms(text: str) -> list[str]:
    """Every term of every topic list `text` touches."""
    out: list[str] = []
    for topic in TOPICS:
        if has_cue(text, topic):
            out += [t for t in topic if t not in out]
    return out


_FILLER = re.compile(r"^(?:对了|其实|另外|还有|哦|嗯|by the way|actually|also|oh|well|and)[，,\s]*", re.I)


def about_someone_else(statement: str) -> bool:
    """The statement's subject is a third party ("我朋友不吃辣", "My husband is allergic to nuts")."""
    text = _FILLER.sub("", statement.strip()).lower()
    return any(text.startswith(c.strip()) for c in THIRD_PARTY)


def is_request(statement: str) -> bool:
    """A question or a one-off request ("帮我查…", "Book a meeting…") says nothing lasting about the user,
    unless it sets a standing rule ("以后…", "never…", "不要…")."""
    text = statement.strip().lower()
    if has_cue(statement, STANDING) or has_cue(statement, KIND_CUES["constraints"]):
        return False
    if text.endswith(("?", "？")):  # unless a hedged thought about oneself ("Maybe I could try it, I guess?")
        return not (hedges(statement) and (has_cue(text, ["i", "i'm", "i'd"]) or "我" in text))
    return any(text.startswith(s) if s.isascii() else s in text[:12] for s in REQUEST_STARTS)


def negated(clause: str) -> bool:
    return has_cue(clause, NEGATIONS) is not None


# --- explicitness (seed recall-agent §4.6: the later *and more explicit* statement wins) ------------
STRONG = ["绝对", "一定", "千万", "坚决", "永远", "从来不", "从不", "必须", "严禁", "务必", "完全不", "一点都不",
          "一口都不", "总是", "每次都", "absolutely", "definitely", "never", "always", "must", "strictly",
          "under no circumstances",
          "certainly", "at all", "100%", "completely"]
CONSTRAINTS = ["过敏", "不能吃", "不能喝", "不能碰", "禁止", "忌口", "不可以吃", "不耐受", "医生说", "医生不让", "确诊",
               "allergic", "allergy", "can't eat", "cannot eat", "can't have", "cannot have", "must not", "intolerant",
               "diagnosed", "doctor said", "doctor told", "not allowed"]
EPISTEMIC = [*HEDGES, "或许", "似乎", "估计", "我猜", "应该可以", "不太确定", "说不好", "i guess", "i think", "kind of",
             "sort of", "possibly", "i suppose", "could be", "not certain", "i believe", "might be"]
_SOFT_END = re.compile(r"吧[。！!.]?\s*$")  # a closing 吧 softens a claim ("可以吃了吧")


def hedges(statement: str) -> int:
    """How many distinct hedges the statement carries (可能 / 好像 / maybe / I guess, a closing 吧)."""
    return count_cues(statement, EPISTEMIC) + bool(_SOFT_END.search(statement.strip()))


def is_constraint(statement: str) -> bool:
    """A stated constraint: an allergy, a diagnosis, "can't eat", "must not", 绝对不, never."""
    return has_cue(statement, CONSTRAINTS) is not None or (negated(statement)
                                                           and has_cue(statement, STRONG) is not None)


def explicitness(statement: str, role: str = "user") -> float:
    """How explicitly the statement commits, in [0, 1] (§4.6 "更明确的表述"): strong modality ("always" as
    much as "never"), a stated constraint (an allergy, a diagnosis, "can't eat") and a stated change ("现在开始
    我不吃辣了", "no longer") raise it; each hedge, a question and a paraphrase by the assistant lower it."""
    score = 0.5 + 0.2 * min(2, count_cues(statement, STRONG))
    score += 0.2 if has_cue(statement, CONSTRAINTS) is not None else 0.0
    score += 0.2 if has_cue(statement, CHANGE) else 0.0
    score -= 0.2 * min(3, hedges(statement))
    if statement.strip().endswith(("?", "？", "吗", "吗。")):
        score -= 0.2
    if role != "user":
        score -= 0.2
    return round(max(0.0, min(1.0, score)), 2)


def standing(statement: str) -> bool:
    """An explicit statement that holds until the user says otherwise: a constraint (an allergy, "must not"), a
    rule or habit stated with "never" / "always" / "以后" / "从不", without a hedge. A time window never hides
    one (`reflect.standing_step`)."""
    return hedges(statement) == 0 and (is_constraint(statement) or has_cue(statement, STANDING) is not None
                                       or has_cue(statement, STRONG) is not None)


def _utc_day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=timezone.utc)


def explicit_range(question: str) -> TimeRange | None:
    """An explicit date or month in the question -> that day or month (§4.2(1))."""
    if m := _DAY.search(question):
        start = _utc_day(*map(int, m.groups()))
        return TimeRange(since=start, until=start + timedelta(days=1))
    if m := _MONTH.search(question):
        y, mo = map(int, m.groups())
        return TimeRange(since=_utc_day(y, mo, 1), until=_utc_day(y + mo // 12, mo % 12 + 1, 1))
    if m := _EN_DATE.search(question.lower()):
        d1, month, d2, year = m.groups()
        y = int(year)
        mo, day = _MONTHS.index(month) + 1, d1 or d2
        if day:
            start = _utc_day(int(y), mo, int(day))
            return TimeRange(since=start, until=start + timedelta(days=1))
        return TimeRange(since=_utc_day(int(y), mo, 1), until=_utc_day(int(y) + mo // 12, mo % 12 + 1, 1))
    return None


def window_cue(question: str) -> tuple[str, int] | None:
    """(label, days) of the first time-window cue in the question, by window length."""
    for label, days, cues in WINDOWS:
        if has_cue(question, cues):
            return label, days
    return None


# --- hypotheses of their own (§4.1) and query rewriting (§4.4) ----------------------------------------
KIND_QUERY = {  # words a hypothesis adds to its query: what evidence *of this kind* tends to say
    "constraints": {"zh": ["过敏", "忌口", "不能"], "en": ["allergic", "avoid", "never"]},
    "preferences": {"zh": ["喜欢", "偏好", "爱"], "en": ["like", "prefer", "love"]},
    "profile": {"zh": ["我是", "我在"], "en": ["i am", "i work"]},
}
_CJK = re.compile(r"[\u4e00-\u9fff]")


def lang(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


def statement_kind(statement: str) -> str | None:
    """The memory kind a statement's own cues name (a constraint, a preference), None when it names none:
    relevance to a hypothesis is judged against this (§4.4 "命中是否与假设一致")."""
    if is_constraint(statement) or has_cue(statement, KIND_CUES["constraints"]):
        return "constraints"
    if has_cue(statement, KIND_CUES["preferences"]):
        return "preferences"
    return None


_EN_NAME = re.compile(r"(?<![.!?。！？]\s)(?<!^)\b[A-Z][a-zA-Z0-9\-]{2,}(?:\s[A-Z][a-zA-Z0-9\-]+)*")
_LATIN_IN_CJK = re.compile(r"(?:^|(?<=[\u4e00-\u9fff\s，,]))[A-Za-z][A-Za-z0-9\-]{2,}")
_DATES = re.compile(r"\d{1,2}月\d{1,2}[日号]|\d{4}年\d{1,2}月|\b(?:" + "|".join(m[:3] for m in _MONTHS)
                    + r")[a-z]*\.?\s+\d{1,2}\b", re.I)
_NAME_FLAGS = {"nr", "nrt", "ns", "nt", "nz", "nrfg"}
NOT_NAMES = {"The", "This", "That", "What", "When", "Where", "Which", "And", "But", "Also", "Just", "Thanks", "Sure",
             "Okay", "Yes", "Hey", "Hello", "Please", *(m.capitalize() for m in _MONTHS)}


def entities(text: str) -> list[str]:
    """Names and dates a statement mentions ("Phoenix", "李明", "杭州", "5月3日", "March 4"), for the next
    round's query (§4.4 改写 query_text)."""
    out = [m.group(0) for m in _DATES.finditer(text)]
    if _CJK.search(text):
        import jieba.posseg as pseg

        out += [w.word for w in pseg.cut(text) if w.flag in _NAME_FLAGS and len(w.word) >= 2]
        out += _LATIN_IN_CJK.findall(text)
    else:
        out += [m.group(0) for m in _EN_NAME.finditer(text) if m.group(0) not in NOT_NAMES]
    cue_words = {c for cs in (*KIND_CUES.values(), CONSTRAINTS, STRONG, HEDGES, CHANGE) for c in cs}
    out = [o.strip() for o in out if o.strip() and o.strip() not in cue_words]
    return [o for o in dict.fromkeys(out) if not any(o != x and o in x for x in out)]


REFERS = ["那个", "那件", "那次", "那家", "上次", "之前说的", "我们聊过", "聊到的", "the one", "last time", "we talked",
          "we discussed", "that project", "that trip", "you know the"]  # the question points at one specific thing
