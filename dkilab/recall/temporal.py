"""Date cues in a question, resolved to a time window against a reference time (when the question is
asked, else the newest message): the `temporal_focus` lever of multi-signal recall.

    date_window("What did Ana cook last week?", now)      -> (Monday of last week, Monday of this week)
    date_window("我们五月份去了哪里？", now)                 -> (the latest 1 May before now, 1 June)

Absolute cues: ISO dates, "7 May 2023", "May 7, 2023", "in May (2023)", "May 2023", "in 2022", and
2023年5月7日 / 5月7日 / 5月 / 五月份. Relative cues: today, yesterday, N days / weeks / months / years ago,
last / this week / month / year, recently, and 今天 昨天 前天 N天前 N周前 N个月前 上周 上个月 去年 今年 本月
最近. A month or day without a year is the latest one not after the reference time. A relative "N units
ago" is a window around that point, half a unit wide on each side. A cue that names its year wins
("What did she recommend recently, on February 7, 2022?" is about that day; "in May 2023" is May 2023, not
the latest May); else the first cue in the question; a question with none gives None. Regular expressions,
not a date library: the cues are a closed set, and dateparser's `search_dates` costs tens of milliseconds
per query and reads the modal "may" as a month.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta

Window = tuple[datetime, datetime]
# the version of the rules: part of every cell whose ranking reads a date window (the learned fusion's digest,
# a recalling strategy's identity under temporal_focus). 2: a cue that names its year wins
RULES = "dates2"

MONTHS = {name: i + 1 for i, name in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
MONTHS |= {name[:3]: i for name, i in list(MONTHS.items()) if name != "may"} | {"sept": 9}
_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_NUM_EN = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3, "few": 3, "couple of": 2}
_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365, "天": 1, "日": 1, "周": 7, "星期": 7, "个星期": 7,
              "礼拜": 7, "个礼拜": 7, "月": 30, "个月": 30, "年": 365}


def _zh_int(text: str) -> int | None:
    """An Arabic or Chinese numeral up to 99 (五, 十二, 二十, 两)."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_ZH_DIGITS.get(tens, 0) if tens else 1) * 10 + (_ZH_DIGITS.get(ones, 0) if ones else 0)
    return _ZH_DIGITS.get(text) if len(text) == 1 else None


def _day(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_window(year: int, month: int) -> Window:
    start = datetime(year, month, 1)
    end = datetime(year + (month == 12), month % 12 + 1, 1)
    return start, end


def _latest(now: datetime, month: int | None, day: int | None = None) -> Window | None:
    """The latest `month` (or `month`/`day`) not after `now`."""
    if month is None:
        return None
    for y in range(now.year, now.year - 8, -1):  # 29 February: back to the last leap year
        try:
            start = datetime(y, month, day or 1)
        except ValueError:
            continue
        if start <= now.replace(tzinfo=None):
            return (start, start + timedelta(days=1)) if day else _month_window(y, month)
    return None


def _safe_day(year: int, month: int, day: int) -> Window | None:
    try:
        start = datetime(year, month, day)
    except ValueError:
        return None
    return start, start + timedelta(days=1)


def _ago(now: datetime, n: int, unit_days: int) -> Window:
    centre = now - timedelta(days=n * unit_days)
    half = timedelta(days=max(1, unit_days // 2))
    return _day(centre - half), _day(centre + half) + timedelta(days=1)


def _rules(now: datetime):
    """(pattern, resolver) pairs, the `_DATED` ones that name a year first; each resolver gets the match and
    returns a window."""
    today = _day(now)
    week0 = today - timedelta(days=today.weekday())
    month0 = today.replace(day=1)
    prev_month = (month0 - timedelta(days=1)).replace(day=1)
    return [
        (r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", lambda m: _safe_day(int(m[1]), int(m[2]), int(m[3]))),
        (r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]", lambda m: _safe_day(int(m[1]), int(m[2]), int(m[3]))),
        (r"(\d{4})\s*年\s*(\d{1,2}|[一二三四五六七八九十]+)\s*月",
         lambda m: _month_window(int(m[1]), _zh_int(m[2]) or 0) if 1 <= (_zh_int(m[2]) or 0) <= 12 else None),
        (rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b",
         lambda m: _safe_day(int(m[3]), MONTHS[m[2]], int(m[1]))),
        (rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b",
         lambda m: _safe_day(int(m[3]), MONTHS[m[1]], int(m[2]))),
        (rf"\b({_MONTH})\.?,?\s+(\d{{4}})\b", lambda m: _month_window(int(m[2]), MONTHS[m[1]])),
        (r"\b(?:in|during)\s+((?:19|20)\d{2})\b", lambda m: (datetime(int(m[1]), 1, 1), datetime(int(m[1]) + 1, 1, 1))),
        (rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b", lambda m: _latest(now, MONTHS[m[2]], int(m[1]))),
        (rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!\s*(?:am|pm|:))",
         lambda m: _latest(now, MONTHS[m[1]], int(m[2]))),
        (rf"\b(?:in|during|since|of|early|late|mid|mid-)\s+({_MONTH})\b", lambda m: _latest(now, MONTHS[m[1]])),
        (r"(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]", lambda m: _latest(now, int(m[1]), int(m[2]))),
        (r"(\d{1,2}|十[一二]?|[一二三四五六七八九])\s*月份?(?!前)",
         lambda m: _latest(now, _zh_int(m[1])) if 1 <= (_zh_int(m[1]) or 0) <= 12 else None),
        (r"\b(?:today|tonight|this morning|this afternoon|this evening)\b|今天|今晚|今早|今日",
         lambda m: (today, today + timedelta(days=1))),
        (r"\byesterday\b|昨天|昨晚|昨日", lambda m: (today - timedelta(days=1), today)),
        (r"\bthe day before yesterday\b|前天", lambda m: (today - timedelta(days=2), today - timedelta(days=1))),
        (r"\b(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|couple of|a few|few)\s+"
         r"(day|week|month|year)s?\s+ago\b",
         lambda m: _ago(now, int(m[1]) if m[1].isdigit() else _NUM_EN[m[1]], _UNIT_DAYS[m[2]])),
        (r"(\d+|[一二两三四五六七八九十]+)\s*(个星期|个礼拜|星期|礼拜|个月|天|周|年)(?:之)?前",
         lambda m: _ago(now, _zh_int(m[1]) or 1, _UNIT_DAYS[m[2]])),
        (r"\blast\s+week\b|上周|上个?星期|上个?礼拜", lambda m: (week0 - timedelta(days=7), week0)),
        (r"\bthis\s+week\b|这周|本周|这个?星期", lambda m: (week0, today + timedelta(days=1))),
        (r"\blast\s+month\b|上个?月", lambda m: (prev_month, month0)),
        (r"\bthis\s+month\b|这个月|本月", lambda m: (month0, today + timedelta(days=1))),
        (r"\blast\s+year\b|去年", lambda m: (datetime(today.year - 1, 1, 1), datetime(today.year, 1, 1))),
        (r"\bthis\s+year\b|今年", lambda m: (datetime(today.year, 1, 1), today + timedelta(days=1))),
        (r"\b(?:recently|lately|the other day)\b|最近|前几天|前些天",
         lambda m: (today - timedelta(days=14), today + timedelta(days=1))),
    ]


# the first rules of `_rules` name a year: ISO, 2023年5月7日, 2023年5月, 7 May 2023, May 7, 2023, May 2023, in 2023
_DATED = 7


def date_window(query: str, now: datetime) -> Window | None:
    """The time window the question's date cue names (one that names its year, else the first), or None.
    Naive datetimes in `now`'s zone (the caller attaches it); `now` is when the question is asked."""
    text = query.lower()
    naive = now.replace(tzinfo=None)
    found = []
    for k, (pattern, resolve) in enumerate(_rules(naive)):
        m = re.search(pattern, text)
        if m:  # a cue that names its year comes first, wherever it stands ("recently, on May 7, 2023")
            found.append((k >= _DATED, m.start(), -len(m[0]), resolve, m))
    for _, _, _, resolve, m in sorted(found, key=lambda f: f[:3]):
        window = resolve(m)
        if window is not None:
            start, end = window
            return start.replace(tzinfo=now.tzinfo), end.replace(tzinfo=now.tzinfo)
    return None
