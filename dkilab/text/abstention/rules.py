"""The sure rules of the hybrid abstention detector (`RULES_VERSION`): what an answer's wording settles
without the learned component. `rule_decision` returns True (abstains), False (answers) or None (the learned
component in `learned` decides); `masked` is the view both read, with quotes, titles and names
masked. Each rule, with the phrasings that prompted it, is listed in `rule_decision`'s docstring and in
docs/hallucination.md."""
from __future__ import annotations

import re
from functools import lru_cache

from dkilab import prompts
from dkilab.text.abstention.clauses import (
    EN_FILLER,
    PREFIX,
    PROTOCOL,
    QUOTED,
    ZH_FILLER,
    clauses,
    is_third,
    normalise,
    strip_fillers,
)

CUES = re.compile(r"\b(?:not?|n't|never|none|nothing|nobody|nowhere|neither|nor|unknown|unclear|unsure|uncertain|"
                   r"lack\w*|missing|without|unable|can'?t|cannot|couldn'?t|won'?t|don'?t|didn'?t|doesn'?t|isn'?t|"
                   r"wasn'?t|haven'?t|hasn'?t|hadn'?t|forg[eo]t\w*|blank|idea|sorry|afraid|guess\w*|rather|"
                   r"record\w*|mention\w*|told|tell|recall|remember|ring a bell|came up|discuss\w*|"
                   # rules version 10: ways to say something is missing that carry no negation ("You've kept the
                   # name to yourself", "You left out the address", "It slipped past me"): never a sure answer
                   r"to yourself|left\b[^.;]*\bout|slipp\w*|held back|withh[eo]ld\w*|omit\w*|skipp\w*|glossed over|"
                   r"hole|gap|in the dark|making it up|invent\w*|mystery)\b|"
                   r"n't|[不没無无未缺忘否别莫]|想不|记不|印象|记录|提过|提到|聊过|告诉|确定|猜|抱歉|遗憾|恐怕|瞎编|"
                   r"乱编|编的|骗你|漏掉|略过|保密|空白", re.I)


_FRAGMENT = re.compile(r"(?:unknown|not sure|unsure|no idea|no clue|i (?:don't|do not) know|n/?a|"
                       r"insufficient (?:information|info|data)|not enough (?:information|info)|can't say|cannot say|"
                       r"hard to say|no information|未知|不确定|不知道|不清楚|不详|无从得知|无法确定|没法确定|没有提到|"
                       r"没提到|没有信息|不记得)(?:[,，]\s*(?:sorry|i'm afraid|抱歉))?", re.I)


_GUESS = re.compile(r"\b(?:i think it was|i believe it was|probably|maybe|perhaps|possibly)\b|可能是|大概是|好像是|"
                    r"应该是|也许是",
                    re.I)
_HEDGE = re.compile(r"^(?:probably|maybe|perhaps|possibly|likely|i think|i believe|i guess|my guess|if i had to|可能|"
                    r"也许|大概|估计|我觉得|我猜|我认为|应该)", re.I)
_CONTRAST = re.compile(r"^(?:but|however|though|although|still|yet|但是?|不过|可是|后来才?|最后)\s*[,，]?\s*", re.I)
SPEAKER = re.compile(r"\b(?:i|i'm|i've|i'd|me|my|mine|we|we've|us|our)\b|我", re.I)
_ZH_ATTRIBUTIVE = re.compile(r"^不[\u4e00-\u9fff]{1,4}的[\u4e00-\u9fff]")
_ZH_FIRST_PERSON_ABSENCE = re.compile(r"我(?:们)?(?:一点儿?(?:也|都)|完全|真的|实在|确实|也|还|都|根本|压根儿?)*"
                                      r"(?:无法|不|没|记不|想不|答不|说不)")
# a run of two or more capitalised words ("Nothing Else Matters", "I Can't Remember"): a title or a name
_TITLE_RUN = re.compile(
    r"\b[A-Z][\w'’]*(?:[ ,]+(?:(?:of|to|a|an|the|for|in|on|and|or|me|you|my|it|is|be)\b[ ]*)*[A-Z][\w'’]*)+")
_PERSON_NOUN = (r"(?:sister|brother|boss|mum|mom|mother|dad|father|colleague|son|daughter|husband|wife|partner|"
                r"landlord|landlady|doctor|friend|teacher|manager|neighbou?r|roommate|flatmate|aunt|uncle|cousin|"
                r"grandma|grandmother|grandpa|grandfather|kids?|children|girlfriend|boyfriend|co-?worker|parents?|"
                r"family|"
                # rules version 8: trades and other people a user deals with
                r"plumber|electrician|mechanic|builder|contractor|lawyer|solicitor|accountant|dentist|nurse|vet|"
                r"therapist|coach|trainer|tutor|agent|realtor|estate agent|driver|courier|nanny|babysitter|cleaner|"
                r"receptionist|waiter|waitress|classmate|in-laws?|niece|nephew|fianc[eé]e?|ex|stepmother|stepfather)")
# a person of the user's life named by a noun ("your brother", "the plumber"), not their possession ("your brother's")
_EN_NOUN_PHRASE = rf"(?:your|my|his|her|their|the|our) (?:\w+ )?{_PERSON_NOUN}s?\b(?!'s)"
_EN_PERSON = re.compile(rf"^(?:(?:he|she|they)\b|{_EN_NOUN_PHRASE}|"
                        r"(?:nobody|no one)\b)", re.I)
_ZH_PERSON_NOUN = (r"(?:妈妈|爸爸|爸|妈|同事|老板|哥哥|姐姐|妹妹|弟弟|儿子|女儿|老公|老婆|丈夫|妻子|朋友|房东|医生|"
                   r"老师|经理|客户|邻居|室友|家人|父母|孩子|领导|男朋友|女朋友|"
                   # 规则第 8 版：行当和用户打交道的人
                   r"水管工|电工|修车师傅|师傅|中介|律师|会计|牙医|护士|兽医|教练|家教|司机|快递员|快递|保姆|保洁|前台|"
                   r"服务员|店员|客服|物业|保安|同学|舍友|上司|主管|表哥|表姐|表弟|表妹|堂哥|堂姐|叔叔|舅舅|姑姑|阿姨|"
                   r"爷爷|奶奶|外公|外婆|侄子|侄女|外甥|男友|女友|对象|未婚夫|未婚妻|前任)")
_ZH_NOUN_PHRASE = rf"(?:你|他|她)?的?{_ZH_PERSON_NOUN}"  # 你妹妹, 她的同事, 水管工
_ZH_PERSON = re.compile(rf"^(?:他们|她们|他|她|没人|{_ZH_NOUN_PHRASE}|老[\u4e00-\u9fff])(?!的)")
# what a person in the story did not know, remember or find: a fact about them, not about the conversation
_KNOWING = re.compile(r"\b(?:know|knew|known|remember\w*|recall\w*|idea|sure|find|found|forg[eo]t\w*|heard|"
                      r"understand\w*|notice\w*|realis\w*|realiz\w*|tell anyone|told anyone|blank|clue|in the dark|"
                      r"ring (?:a|any) bells?)\b|知道|清楚|记得|确定|想不起|想起|记不|听说|明白|发现|忘|跟任何人|"
                      r"告诉任何人|告诉别人|一无所知|印象|头绪|一头雾水|摸不着头脑", re.I)
_TO_US = re.compile(r"\b(?:to|with) (?:me|us)\b|\b(?:told|tell|shared|mentioned|said) (?:me|us)\b|"
                    r"(?:跟|和|对|向|给)(?:我|我们)|告诉(?:我|我们)", re.I)
# idioms that only sound like absence: "不知道为什么，你那天特别开心" (for some reason, you were happy)
_IDIOM = re.compile(r"^不知(?:道)?(?:为什么|为何|怎么(?:的|回事)?)[，,]|^for some reason\b", re.I)
WH = re.compile(r"\b(?:why|what|where|when|which|who|whose|how|whether)\b|什么|哪|谁|几|多少|为什么|怎么", re.I)
# the user's own words reported back: "You said you don't eat pork", "You don't drive at night, you told me",
# "你说过你不吃猪肉", "你不喝咖啡，你跟我说过": a fact about the user, whatever its negation
_REPORTED_USER = re.compile(
    r"^(?:as )?you (?:said|told me|mentioned)(?: that)? you(?:'re| are| were)? (?:don't|do not|didn't|did not|can't|"
    r"cannot|never|won't|aren't|weren't|not|no longer)\b|"
    r"^you (?:don't|do not|didn't|did not|can't|cannot|never|aren't|weren't)\b[^.;]*,\s*(?:as )?you (?:told me|said)\b|"
    # rules version 10: "You said you had no plans"
    r"^(?:as )?you (?:said|told me|mentioned)(?: that)? you (?:had|have|'d|'ve) (?:no|nothing)\b|"
    r"^你(?:跟我|和我|对我)?(?:说过|说|告诉过我|提过)(?:你)?(?:不|没|从来不|从不|受不了)|"
    r"^你(?:不|从来不|从不|没)[^，,。]+[，,]\s*你(?:跟我|和我)?(?:说过|说的|告诉过我)", re.I)
# an embedded question, then "I don't know": "你最后选了哪套房子，我不知道", "What colour it was, I couldn't say"
_DONT_KNOW_LAST = re.compile(
    r"^(?:我|我们)?(?:真|也|实在|确实|完全|真的|一时|一下子|暂时)?(?:不知道|不清楚|说不上来|说不准|说不好|不记得|"
    r"记不得|记不清|想不起来|答不上来|没法说|不确定)(?:了|啊|呢)?$|^(?:i|we) (?:really |honestly |just )?(?:couldn't|"
    r"can't|cannot|don't|do not) (?:say|tell|know|recall|remember)$", re.I)
# the Chinese negative potential complement on a verb of saying or judging, said by the answerer or of the
# record: "我说不出来", "从之前的对话里判断不出来" (an inability to say, not a fact about someone in the story)
_ZH_SOURCE_ADVERBIAL = re.compile(
    r"^(?:从|根据|按照?|就|在)[^，,。]{0,14}?(?:对话|聊天|记录|消息|内容|信息)(?:里|中|来看|看来|上|看)?")
_ZH_CANNOT_SAY = re.compile(r"^(?:我|我们)?(?:也|真|实在|确实|完全|真的|暂时|还)?(?:说|判断|想|答|回答|看|查|确定|分辨|"
                            r"猜)(?:不出来?|不上来)(?:了|啊|呢|吧)?$")
# idioms of not knowing (rules version 4). Said by the answerer ("I'm drawing a blank on it", "I'm in the
# dark about that", "我一无所知") they abstain; said of a person in the story ("Your boss drew a blank") they
# are a fact about that person. The first kind needs the answerer as subject, the second takes the topic as
# subject ("What your boss said doesn't ring a bell", "That's a mystery to me", "这个我毫无头绪").
_EN_IDIOM_I = re.compile(
    r"\b(?:i'm|i am|we're|we are|i've been|we've been)(?: \w+ly)?(?: just| still)? (?:drawing a (?:complete |"
    r"total )?blank|coming up (?:empty|blank|short)|(?:completely |totally )?in the dark|stumped|at a loss|clueless)\b|"
    r"\bi (?:draw|drew|have drawn|'ve drawn) a (?:complete |total )?blank\b|\bi (?:come|came|have come|'ve come) up "
    r"(?:empty|blank|short)\b|\b(?:i'd|i would|we'd|we would) (?:only |just )?be (?:making (?:it|that|something|"
    r"things) up|guessing|inventing|making things up)\b|"
    # rules version 6: the first the answerer hears of it, what the answerer cannot speak to, a gap in what it knows
    r"\bthe first (?:i'm|i am|i've|i have) (?:hearing|heard) (?:of|about)\b|"
    r"\bi(?: can't| cannot| can not| am not able to|'m not able to| am unable to|'m unable to) (?:speak to|answer for|"
    r"vouch for|comment on|confirm)\b|\b(?:gap|hole) in (?:what i know|my (?:memory|knowledge|notes))\b|"
    r"\b(?:i'm|i am|we're|we are) (?:a (?:bit|little) )?short on (?:details|information|info|specifics)\b", re.I)
_EN_IDIOM_TOPIC = re.compile(
    r"\b(?:doesn't|does not|didn't|did not|don't|do not|won't|wouldn't)\s+ring (?:a|any) bells?\b|\brings? no bells?\b|"
    r"\bescapes? me\b|\b(?:i|we)(?:'ve| have)(?: got)? nothing (?:on|about)\b|"
    r"\bnothing (?:about|on|regarding) [^.;]*\b(?:has |have )?(?:come|came) up\b|"
    r"\b(?:a (?:complete |total |bit of a )?mystery|news) to (?:me|us)\b|\bbeats me\b|\bnothing comes to mind\b|"
    r"\b(?:falls?|is|that's|it's|lies) (?:well |completely )?(?:outside|beyond) (?:of )?(?:what|anything|everything) "
    r"(?:we(?:'ve| have)?|you(?:'ve| have)?) (?:talked about|discussed|covered|told me|shared|mentioned)\b", re.I)
_EN_LEAD = re.compile(r"^(?:(?:honestly|frankly|truthfully|sadly|unfortunately|really|well|hmm+|oh|so|look|okay|ok|"
                      r"sorry|i'm afraid|afraid|alas|truly|actually)\b[,\s]*)+", re.I)
_EN_REPORTED_OPENER = re.compile(r"^(?:as )?you (?:said|told me|mentioned|wrote)(?: that)?\s+", re.I)
_EN_FOR_SOMEONE = re.compile(r"\bfor (?:him|her|them|your|his|their|[A-Z][a-z]+)\b")
_ZH_IDIOM = re.compile(r"(?:一无所知|毫无头绪|没(?:有)?(?:什么|任何)?头绪|一头雾水|摸不着头脑|不得而知|"
                       r"无从(?:知道|得知|知晓|判断|说起|查证)|没(?:有)?(?:什么|任何)?印象|(?:一点|什么|任何)印象(?:都|"
                       r"也)没(?:有)?|(?:想|记)不起来|"
                       r"脑子(?:里)?一片空白|两眼一抹黑|"
                       # rules version 6
                       r"(?:还是)?第一次听(?:说|到)|头一回听|(?:没法|无法|不能)替你(?:回答|作答)|推断不出|推不出|"
                       r"推断不了|判断不了|"
                       # rules version 10: the answerer would be making it up ("我要是说了就是瞎编", "那是在骗你")
                       r"(?:就是|那是|那就是|都是)(?:在)?(?:瞎编|乱编|编的|骗你|胡说|乱说|乱猜|瞎猜))(?!的)")
_ZH_TOPIC_START = re.compile(r"^(?:这个|这件事|这事|那个|那件事|那事|这|那|对此|关于这个|至于这个)")
# rules version 11 (written from the dev part of the check on replies by other people, `bench/abstention_external`):
# words with a negation that say nothing is missing ("can't wait", "I'll never forget", "不错", "了不起", "不过"), a
# rhetorical negation of knowing, which affirms it ("怎么可能不知道", "还会有人不知道吗", "who doesn't love"), and
# Chinese A-not-A questions and question tags ("吓不吓人", "了解不？"): masked like quotes, they are no word of absence
_NOT_ABSENCE = re.compile(
    r"\b(?:can'?t|cannot|couldn'?t) (?:wait|believe|get enough|stop (?:smiling|thinking)|help (?:but|myself))\b|"
    r"\b(?:i'?ll|i will|we'?ll|i) (?:never|not) forget\b|\bwill never forget\b|\bdon'?t (?:worry|hesitate)\b|"
    r"\bnever (?:give up|say never|gets? old)\b|\bnot (?:only|just|bad|to mention)\b|\bno (?:wonder|problem|worries|"
    r"doubt)\b|\bwho (?:doesn'?t|wouldn'?t|don'?t) (?:love|like|know|enjoy)\b|"
    r"(?:只)?不过|不错|不客气|没问题|不用谢|没关系|不得不|忍不住|了不起|不少|不停|不断|差不多|不仅|不但|不光|不只|不止|"
    r"不管|不如|没错|不然|不久|难不(?:倒|住)|不(?:算|低|贵|便宜|远|小|高|长|短)(?!清楚|确定|记得|了解|知道|明白|懂|太)|"
    r"(?:怎么|哪)(?:可能|能|会)?不(?:知道|记得|了解|认识|喜欢)|能不(?:知道|记得|了解)(?:嘛|吗|呢)|"
    r"(?:有谁|谁|哪有人|还会有人|还有人|哪个人|没有人|没人)(?:会)?不(?:知道|认识|了解|喜欢|记得)|"
    # rules version 13: wondering about the listener ("不知道你会不会喜欢", "不知道你有没有看过"): no absence
    r"不知道你们?(?:会不会|喜不喜欢|有没有|是不是|是否|能不能|感不感兴趣|爱不爱|觉得|看过|听过|去过)|"
    r"([\u4e00-\u9fff])不\1|(?:知道|了解|晓得|好|对|是|行|喜欢|记得|认识)不(?=\s*[？?])", re.I)
# rules version 11: a first clause that is a bare answer word ("是的", "对", "没错", "知道", "看过", "Yes", "Yep") or
# states a number, a date or a title, with no word of absence, answers; what follows may disclaim another part
# ("他出生于 1962年，但我不知道他在哪里出生", "Yes, but I don't remember the year")
_ANSWER_WORD = re.compile(r"^(?:是的?|是(?:啊|呀|呢)|嗯+|对(?:的|呀|啊)?|没错|当然(?:了|啦)?|知道(?:呀|啊)?|看过(?:呀|"
                          r"啊)?|听过(?:呀|啊)?|去过(?:呀|啊|的)?|yes|yeah|yep|yup|definitely|absolutely)$", re.I)
_TOPIC_OPENER = re.compile(r"^(?:关于|至于|对于|说到)|^(?:about|regarding|as for|as to|on)\b", re.I)
# rules version 12 (written from the English dev part of the check on replies by other people): words of knowing,
# telling, records and the answerer's role. A clause without one of them, and without a word of absence, tells
# something other than what the answerer lacks
EN_ABOUT_KNOWING = re.compile(
    r"\b(?:know\w*|(?:un)?aware|familiar|info\w*|detail\w*|specific\w*|record\w*|notes?|noted|memor\w*|remember\w*|"
    r"recall\w*|mention\w*|t[eo]ll\w*|told|sa(?:y|id|ys)|shar\w*|discuss\w*|talk\w*|conversation\w*|chat\w*|histor\w*|"
    r"c[oa]me up|hear\w*|heard|sure|certain\w*|idea|clue\w*|guess\w*|speculat\w*|assum\w*|fill (?:me|us) in|remind\w*|"
    r"let (?:me|us) know|context|data|access|track|files?|logs?|scope|outside|beyond|answer\w*|question\w*|ask\w*|find|"
    r"found|look\w* up|check\w*|confirm\w*|verify|privy|insight|whatever|anything|nothing|something|topic|subject|"
    r"matter|source|evidence|learn\w*|understand\w*|clear|explain\w*|brought|bring|provid\w*|giv\w*|gave|offer\w*|"
    r"pass|skip\w*|hold\w*|have on|got on|keep|kept|stor(?:e|ed|ing)|saved?|realis\w*|realiz\w*|point|help\w*|"
    r"blind spot|as far as|AI|assistant|model|equipped|sorry|afraid|apolog\w*|unfortunately)\b", re.I)
# rules version 13 (written from the Chinese dev part of the check on replies by other people): words of knowing,
# telling and records in Chinese; a Chinese answer that speaks of the answerer without one of them, and without a
# word of absence, answers
ZH_ABOUT_KNOWING = re.compile(r"知道|清楚|记得|记住|了解|印象|确定|信息|记录|资料|内容|聊|提|说过|讲过|告诉|问|答|猜|"
                              r"想起|想不|忘|听说|范围|超出|以外|之外|空白|头绪|数据|知识|懂|明白|查")
# a topic, then "don't know", then only questions back ("这个不清楚，你知道导演是谁吗？",
# "这就不知道了，你知道他是哪里人吗？")
_ZH_TOPIC_UNKNOWN = re.compile(r"^(?:这个|这|那个|那|这事|那事)?(?:就|我)?(?:也|真|还真是?|实在|确实)?(?:不知道|不清楚|"
                               r"不记得|不了解|说不上来)(?:了|呢|啊|呀)?$")
RULES_VERSION = "14"  # 14: `commit.commitment` decides first (a reply that commits to a value answers)


@lru_cache(maxsize=1)
def _prompt_ngrams() -> frozenset[str]:
    """Word trigrams (English) and character 4-grams (Chinese) of the fixed prompt texts a model is shown
    (the system prompt's first sentences, the trust-and-reasoning rules, the headings): a small model that
    parrots them has neither answered nor declined. The abstention instruction itself is left out."""
    texts = [prompts.SYSTEM["en"].split(" If the memory")[0], prompts.SYSTEM["cn"].split("如果记忆")[0],
             *prompts.CONSTRAINT.values(), *prompts.HISTORY_HEAD.values(), *prompts.PREFERENCES_HEAD.values(),
             *(q.replace("{query}", "") for q in prompts.QUERY.values()), *prompts.FOLLOW_UP.values(),
             *prompts.DEEPSEEK_TOOLS.values()]
    return frozenset(g for t in texts for _, _, g in _windows(_echo_tokens(t)))


def _echo_tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+|[\u4e00-\u9fff]", text.lower())


def _windows(tokens: list[str]):
    """(start, length, text) of every word trigram / Chinese character 4-gram."""
    for i in range(len(tokens)):
        n = 4 if re.match(r"[\u4e00-\u9fff]", tokens[i]) else 3
        if i + n <= len(tokens):
            yield i, n, " ".join(tokens[i:i + n])


def echoes_the_prompt(answer: str) -> bool:
    """Most of the answer (>= 60% of its words / characters) copies the fixed prompt text, and what is left
    does not speak of the answerer: "The [TRUST AND REASONING RULES] are not complete factual records."."""
    tokens = _echo_tokens(answer)
    if len(tokens) < 4:
        return False
    grams, covered = _prompt_ngrams(), [False] * len(tokens)
    for i, n, gram in _windows(tokens):
        if gram in grams:
            covered[i:i + n] = [True] * n
    rest = " ".join(t for t, c in zip(tokens, covered) if not c)
    return sum(covered) >= 0.6 * len(tokens) and not SPEAKER.search(rest)


def masked(text: str) -> str:
    """The answer with quoted speech, 《titles》 and capitalised runs (titles, names) replaced by a placeholder:
    a word of absence inside them is not the answerer's; and (rules version 11) without the negations that
    say nothing is missing (`_NOT_ABSENCE`: "can't wait", "不错", "怎么可能不知道", "了解不？")."""
    return _NOT_ABSENCE.sub(" ", _IDIOM.sub(" ", _TITLE_RUN.sub(_title, QUOTED.sub(" QUOTE ", text))))


def _title(m: re.Match) -> str:
    """A capitalised run is masked as a title unless it ends in "I" ("Honestly, I'm in the dark": rules
    version 4; "Afraid I've got nothing": version 5; "I Still Haven't Found What I'm Looking For" stays a
    title)."""
    return m.group(0) if re.search(r"(?:,\s*|\s)I(?:'m|'ve|'d|'ll)?$", m.group(0)) else " TITLE "


def _someone_else(core: str) -> bool:
    """An English clause whose subject is a person in the story ("Your boss ...", "Tom ...", "She ..."), after
    an opener such as "Honestly," (not a wh-word: "Where you parked ...")."""
    core = _EN_LEAD.sub("", core)
    return bool(_EN_PERSON.match(core) or (is_third(core) and not WH.match(core)))


def _reported_other(bare: str) -> bool:
    """The user's report of someone else, given back: "You said the name didn't ring a bell for your
    colleague", "You told me your boss had no idea" (rules version 5)."""
    m = _EN_REPORTED_OPENER.match(bare)
    if not m:
        return False
    rest = _EN_LEAD.sub("", bare[m.end():].strip())
    idiom = _EN_IDIOM_TOPIC.search(rest)
    return _someone_else(rest) or bool(idiom and _EN_FOR_SOMEONE.search(rest[idiom.end():]))


def _person_does_not_know(parts) -> bool:
    """The first clause says a person in the story did not know, remember or find something ("Your boss had
    no idea about the meeting", "你同事不记得密码了"), and nothing was withheld from the answerer."""
    if not parts:
        return False
    first = parts[0].text
    if re.search(r"[\u4e00-\u9fff]", first):
        core = strip_fillers(first, ZH_FILLER)
        if _ZH_FIRST_PERSON_ABSENCE.search(core):
            return False  # "你儿子在哪个学校我无法确定": the answerer cannot say
        m = _ZH_PERSON.match(core)
        person = m is not None
    else:
        core = strip_fillers(first, EN_FILLER)
        if re.search(r"\b(?:i|we|i'm|i've|we've)\b", core, re.I):
            return False
        m = _EN_PERSON.match(core)
        person = m is not None or (is_third(core) and not WH.match(core))  # "Tom never told anyone ..."
    after = core[m.end():].strip() if m else core  # "你老板说了什么 ...": what the boss said is the topic, not the boss
    whole = " ".join(c.text for c in parts)
    wh, neg = WH.search(after), CUES.search(after)
    if wh and (wh.start() == 0 or neg is None or wh.start() < neg.start()):
        return False  # "电工发现了什么问题不在我们聊过的内容里": an embedded question is the topic (rules version 8)
    return bool(person and _KNOWING.search(first) and not _TO_US.search(whole))


# rules version 8: a person of the user's life named by a noun ("Your brother", "The plumber", "中介那边"), not a
# pronoun or a name (the user themself, in a dataset that speaks of the user in the third person)
_EN_NOUN_PERSON = re.compile(rf"^{_EN_NOUN_PHRASE}", re.I)
_ZH_NOUN_PERSON = re.compile(rf"^(?:{_ZH_NOUN_PHRASE}|[\u4e00-\u9fff]{{1,6}}的人)(?:那边|那儿|们)?(?:也|还|都|一直|"
                             r"从来|根本|并|就|却|压根儿?)*"
                             # the subject, then its negation ("你邻居家猫的品种" is a topic)
                             r"(?:没|不|未|从没|从未)")
# the user telling (or not telling) someone else: "You didn't mention the party to your boss", "You told your
# sister you couldn't make it", "你没跟你妈说这件事"
_EN_NEG = r"(?:(?:didn't|did not|never|haven't|have not|hadn't|had not|still haven't|also|already|only) )?(?:ever )?"
_EN_TOLD_OTHER = re.compile(  # rules version 10: any recipient after "tell" ("You didn't tell your sponsor")
    rf"^you {_EN_NEG}(?:tell|told|warn(?:ed)?|remind(?:ed)?|invite[d]?|ask(?:ed)?|text(?:ed)?|call(?:ed)?|"
    fr"e-?mail(?:ed)?) (?:(?:your|his|her|their) [\w-]+|(?:the|your) (?:\w+ )?{_PERSON_NOUN}s?|any(?:one|body))\b|"
    rf"^you {_EN_NEG}(?:tell|told|mention(?:ed)?|say|said|show(?:ed|n)?|share[d]?|explain(?:ed)?|admit(?:ted)?|reply|"
    rf"replied|answer(?:ed)?|introduce[d]?|text(?:ed)?|e-?mail(?:ed)?) "
    rf"(?:(?!what|where|when|which|who|whose|how|why|whether)[\w'-]+ ){{0,5}}?(?:to|with) "
    rf"(?:(?:your|his|her|their|the) [\w-]+|any(?:one|body))\b", re.I)
_ZH_TOLD_OTHER = re.compile(r"^你(?:也|还|一直|从来|从)?(?:没|没有|不|不想|不敢)?(?:(?:跟|和|对|向|"
                            r"给)(?!我)(?:你的?)?[\u4e00-\u9fff]{1,6}?(?:说|讲|提|聊|谈|解释|交代|透露)|"
                            r"告诉(?!过?我)(?:你的?)?[\u4e00-\u9fff]{1,6})")


# what was or was not said, named or recorded (rules version 9): with a person as subject ("Your boss wasn't
# mentioned", "The plumber never came up", "Your sister didn't say", "你的房东没有出现在聊天里") it may be the
# conversation that lacks it, an abstention; the learned component decides those
_EN_SAYING = re.compile(r"\b(?:mention\w*|say|says|said|tell|tells|told|talk\w*|discuss\w*|spoke|spoken|speak\w*|"
                        r"c[oa]me up|comes up|coming up|br(?:ing|ought) up|named?|specif\w*|shar\w*|record\w*|not(?:e|"
                        r"ed)|cover\w*|appear\w*|given|stated?|referr\w*|reference\w*)\b", re.I)
_ZH_SAYING = re.compile(
    r"(?:没|不|未|从没|从未)(?:有)?(?:被|跟你|和你|对你|向你)?(?:提|说|讲|聊|谈|告诉|出现|记录|透露|交代)")


def _someone_in_the_story_did_not(bare: str, parts) -> bool:
    """Rules version 8: what a person of the user's life, named by a noun, did not do ("Your brother never
    replied to the invitation", "中介那边一直没回你消息", "水管工也不确定漏水的原因"), or what the user told or did not
    tell someone else ("You didn't mention the party to your boss", "You told your sister you couldn't make
    it"): a fact of the story, when the answer never speaks of the answerer (I, me, we, 我) or to it."""
    if not parts or SPEAKER.search(bare) or _TO_US.search(bare):  # SPEAKER: the answerer (I, I'll, we're, 我)
        return False
    first = parts[0].text
    if re.search(r"[\u4e00-\u9fff]", first):
        core = strip_fillers(first, ZH_FILLER)
        if _ZH_TOLD_OTHER.match(core):
            return True
        return bool(_ZH_NOUN_PERSON.match(core) and not _ZH_SAYING.search(core))
    core = _EN_LEAD.sub("", strip_fillers(masked(first), EN_FILLER).strip())
    if _EN_TOLD_OTHER.match(core):
        return True
    m = _EN_NOUN_PERSON.match(core)
    after = core[m.end():].strip() if m else ""
    return bool(m and not WH.match(after) and not _EN_SAYING.search(after))


def _answerer_does_not_know(bare: str, parts, text: str = "") -> bool:
    """The answer says, in an idiom, that the answerer does not know: "I'm drawing a blank on when you moved",
    "What your boss said doesn't ring a bell", "That falls outside what we've talked about", "关于你的新地址，
    我一无所知", "这个我毫无头绪". Not when a person in the story is the subject ("Your boss drew a blank",
    "她对这件事一无所知") or the one it is for ("The name didn't ring a bell for her")."""
    whole = strip_fillers(bare, EN_FILLER).strip()  # `bare`: the answer as `masked` gives it

    def after_a_value(k: int) -> bool:  # rules version 11: "Pad thai. I've got nothing on the price": a value first
        return any(p.kind == "content" and not CUES.search(masked(p.text)) and not WH.search(p.text)
                   and not _TOPIC_OPENER.match(p.text)  # a topic ("你女儿的老师叫什么", "关于那次搬家") is no value,
                   and not re.search(re.escape(p.text) + r"\s*[?？]", text) for p in parts[:k])  # nor one asked back

    if _EN_IDIOM_I.search(whole) and not _someone_else(whole):  # the answerer is named: the whole answer
        at = next((k for k, c in enumerate(parts) if _EN_IDIOM_I.search(masked(c.text))), 0)
        if not after_a_value(at):
            return True
    for k, c in enumerate(parts):  # the non-filler clauses
        # Chinese opens with its topic: "你换工作的事，我..."
        if after_a_value(k) and not re.search(r"[\u4e00-\u9fff]", c.text):
            continue
        if re.search(r"[\u4e00-\u9fff]", c.text):
            core = _ZH_SOURCE_ADVERBIAL.sub("", strip_fillers(c.text, ZH_FILLER))  # "从聊天记录里推不出"
            m = _ZH_IDIOM.search(core)
            if not m:
                continue
            said_by = re.findall(r"我|他|她", core[:m.start()])  # the nearest subject before the idiom
            if (said_by and said_by[-1] == "我") or (not _ZH_PERSON.match(core) and not said_by and (
                    _ZH_TOPIC_START.match(core) or m.start() == 0)):
                return True
            continue
        core = strip_fillers(masked(c.text), EN_FILLER).strip()
        m = _EN_IDIOM_TOPIC.search(core)
        if m and not _someone_else(core) and not _EN_FOR_SOMEONE.search(core[m.end():]) and not re.match(r"^you\b",
                                                                                                         core, re.I):
            return True
    return False


def _offers_a_value(parts, k: int) -> bool:
    """Clause k (of the non-filler clauses) offers a value: it carries no word of absence and either
    hedges ("maybe Lisbon", "I think it was Lisbon", "可能是九点半") or, after a contrast ("but it was
    Lisbon"), ends the answer. "But I have no record of that" is no offer, and neither is "but as an AI,"
    followed by a refusal."""
    c = parts[k]
    body = _CONTRAST.sub("", c.text)
    if c.kind != "content" or CUES.search(body) or not re.search(r"[A-Za-z0-9\u4e00-\u9fff]", body):
        return False  # a bare "yet" split off "We haven't covered that yet" offers nothing
    if _EN_IDIOM_I.search(body) or _EN_IDIOM_TOPIC.search(body) or _ZH_IDIOM.search(body):
        return False  # "but that falls outside what we've talked about": an idiom of not knowing (rules version 7)
    return bool(_HEDGE.match(body) or _GUESS.search(body) or (body != c.text and k == len(parts) - 1))


def _value_first(parts) -> bool:
    """Rules version 11: the first of several clauses answers (a bare answer word, or a number, date or title)
    and carries no word of absence, so what follows disclaims something else: "他出生于1962年08月28日，但我不知道
    他是在哪里出生的", "是的，不过我不记得此片是哪年上映的了", "Yes, but I don't remember the year"."""
    if len(parts) < 2 or parts[0].kind != "content":
        return False
    first = masked(parts[0].text).strip()
    if CUES.search(first) or SPEAKER.search(first):
        return False
    return bool(_ANSWER_WORD.match(first) or re.search(r"\d|TITLE|QUOTE", first))


def _tells_something_else(text: str, every: list) -> bool:
    """Rules version 12: an English answer that tells something other than what the answerer lacks ("Nope, never
    been to something like that. I'm more into reading fantasy novels", "Yay! Next month I'm having an art show
    with my paintings - can't wait!"): no clause the structure calls absence, no clause with a word of absence
    beside a word of knowing, telling or records (`EN_ABOUT_KNOWING`: "not something I'm able to answer"), and
    at least one clause of four words or more that is not a question back and holds neither. `every`: all the
    answer's clauses, fillers included."""
    if re.search(r"[\u4e00-\u9fff]", text):
        return False
    parts = every
    if any(c.kind == "absence" for c in parts):
        return False
    if any(CUES.search(m) and EN_ABOUT_KNOWING.search(m) for m in (masked(c.text) for c in parts)):
        return False
    for c in parts:
        if c.kind != "content" or re.search(re.escape(c.text) + r"\s*\?", text):
            continue
        body = strip_fillers(masked(c.text), EN_FILLER).strip()
        if (len(re.findall(r"[A-Za-z']+", body)) >= 4 and not CUES.search(body) and not EN_ABOUT_KNOWING.search(body)
                and not WH.match(body)):
            return True
    return False


def _topic_unknown_then_asked_back(parts, text: str) -> bool:
    """Rules version 13: "这个不清楚，你知道导演是谁吗？": the topic is not known, and every clause after asks back."""
    if len(parts) < 2 or not _ZH_TOPIC_UNKNOWN.match(strip_fillers(parts[0].text, ZH_FILLER)):
        return False
    return all(re.search(re.escape(c.text) + r"\s*[?？]", text) or re.search(r"[吗呢]$", c.text) for c in parts[1:])


def rule_decision(answer: str) -> bool | None:
    """The rules' sure verdict, or None when the learned component decides (rules version 13):
    - the protocol phrase or a bare abstention fragment ("Unknown.", "不确定。", "I don't know.") abstains;
    - a clause that offers a value ("I'm not sure, maybe Paris", "我不太确定，可能是九点半") answers; a clause
      after "but" that itself denies ("Sorry, but I have no record of it") is no offer;
    - an embedded question, then "I don't know" ("他去了哪里，我不知道") abstains, and so does the answerer's
      or the record's "cannot say" in Chinese ("我说不出来", "从之前的对话里判断不出来"; rules version 3);
    - an idiom of not knowing with the answerer or the topic as subject abstains ("I'm drawing a blank on
      it", "That doesn't ring a bell", "That falls outside what we've talked about", "我一无所知", "这个我
      毫无头绪"; rules version 4; it checks for a person in the story as subject itself; version 6 adds "the
      first I'm hearing of it", "I can't speak to / vouch for / confirm", "nothing about it has come up",
      我第一次听说, 没法替你回答, 推断不出; version 7: "I'm short on details", and such an idiom after "but" is
      no offer of a value);
    - with quoted speech, titles and names masked, an answer with no word of absence answers, unless it speaks
      of the answerer ("That's beyond what I know"): the learned component decides those;
    - a 不-phrase before 的 modifies a noun ("不清楚的地方她都问了客户经理") and answers (没有 ... 的 is left to
      the learned component: "没有这方面的信息" abstains, "没有记录的那几天你在出差" answers);
    - a person in the story who did not know, remember or find something ("Your boss had no idea about the
      meeting", "你同事不记得密码了", in version 5 also in an idiom: "你经理对这事一无所知"), the user's own words
      reported back ("You said you don't eat pork") or their report of someone else (version 5: "You said the
      name didn't ring a bell for your colleague"),
      or a parrot of the prompt's fixed text ("The [TRUST AND REASONING RULES] are not complete factual
      records.") answers;
    - rules version 8: what a person of the user's life, named by a noun (trades included: "The plumber", "中介
      那边"), did not do ("Your brother never replied to the invitation", "水管工也不确定漏水的原因"), and what the
      user told or did not tell someone else ("You didn't mention the party to your boss"), answer when the
      answer never speaks of the answerer or to it; rules version 9: not when the person's verb is one of
      saying, naming or recording ("The plumber never came up", "Your boss wasn't mentioned", "房东没出现在聊天
      里"): that may be the conversation's lack, and the learned component decides;
    - rules version 10: a way of saying something is missing with no negation ("You've kept it to yourself",
      "You left out the address") is never a sure answer; any recipient after "tell" ("You didn't tell your
      sponsor"); the answerer making it up ("我要是说了就是瞎编") abstains; "面包店的人" is a person; 后来 and
      最后 open a clause that offers a value;
    - rules version 11 (from the dev part of the check on replies by other people): negations that say nothing
      is missing ("can't wait", "I'll never forget", 不错, 不过, 了不起), rhetorical ones that affirm knowing
      ("怎么可能不知道", "还会有人不知道吗") and Chinese A-not-A questions ("吓不吓人", "了解不？") are masked; a first
      clause that answers (a number, a title, "Yes", 是的) makes a later disclaimer about another detail an
      answer ("他出生于1962年，但我不知道他在哪里出生"); an idiom of not knowing after a clause that may be a value
      ("Pad thai. I've got nothing on the price") is left to the learned component;
    - rules version 12 (from the English dev part of that check): an English answer that tells something other
      than what the answerer lacks answers ("Nope, never been to something like that. I'm more into reading",
      "Next month I'm having an art show - can't wait!"): a clause of four words or more, not a question back,
      with no word of absence and no word of knowing, telling or records, and no absence clause nor a clause
      that denies knowing ("That's not something I'm able to answer from our chats: the cat's vaccination
      date" stays with the learned component);
    - rules version 13 (from the Chinese dev part): a Chinese answer that speaks of the answerer with no word of
      absence and no word of knowing answers ("我看过好几遍，能不知道嘛"); wondering about the listener ("不知道你会
      不会喜欢") is masked; 是啊 is an answer word; a topic not known followed only by questions back ("这个不清楚，
      你知道导演是谁吗？") and a question then "一时想不起来了" abstain;
    - rules version 14, applied before these by `commit.sure_decision`: a reply with a segment that
      commits to a value answers ("You didn't say the exact day, but you mentioned ...", "不用担心，你的血型是...",
      "No, it wasn't cancelled", a guess after a decline)."""
    text = PREFIX.sub("", normalise(answer)).strip()
    every = clauses(answer)
    if PROTOCOL.match(text) and len(every) == 1:
        return True
    if _FRAGMENT.fullmatch(text.rstrip(" .。!！")):
        return True
    parts = [c for c in every if c.kind != "filler"]
    if any(_offers_a_value(parts, k) for k in range(len(parts))) or _value_first(parts):
        return False
    last = parts[-1].text if parts else ""
    cannot_say = (len(parts) >= 2 and _DONT_KNOW_LAST.match(last)) or _ZH_CANNOT_SAY.match(_ZH_SOURCE_ADVERBIAL.sub("",
                                                                                                                    last))
    if cannot_say and all(WH.search(c.text) for c in parts[:-1]):
        return True
    bare = masked(text)
    if _answerer_does_not_know(bare, parts, QUOTED.sub(" QUOTE ", text)):
        return True
    if _tells_something_else(text, every):
        return False
    if _topic_unknown_then_asked_back(parts, text):
        return True
    if not CUES.search(bare):
        if SPEAKER.search(bare) and re.search(r"[\u4e00-\u9fff]", bare) and not ZH_ABOUT_KNOWING.search(bare):
            return False  # rules version 13: "我看过好几遍，能不知道嘛": the answerer speaks, of nothing it lacks
        return None if SPEAKER.search(bare) else False
    if _ZH_ATTRIBUTIVE.match(text) and not _ZH_FIRST_PERSON_ABSENCE.search(text):
        return False
    if (_person_does_not_know(parts) or _REPORTED_USER.match(bare.strip()) or _reported_other(bare.strip())
            or _someone_in_the_story_did_not(bare, parts) or echoes_the_prompt(text)):
        return False
    return None
