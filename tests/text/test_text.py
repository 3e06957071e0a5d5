import pytest
from dkilab.text import (
    ExtractiveSummarizer,
    HeuristicTokenCounter,
    LLMSummarizer,
    detect_language,
    extract_keywords,
    salient_details,
    split_sentences,
)

ZH = ("我们下个月去云南旅行，计划5月8日出发。同行一共4个人，包括我的同事王明和李华。第一站是昆明，住在翠湖边的酒店，"
      "每晚380元。第二站是大理，我们想在洱海边骑行。最后一站是丽江，预计5月15日返回。大家都不吃辣，所以餐厅要选清淡的。"
      "预算每人大约6000元。")
EN = ("Last weekend I drove to Lisbon with my sister Ana. We left at 7:30 am on Saturday, 12 May 2023. "
      "The trip took about 3 hours. We stayed at a small hotel near the river that cost 95 euros a night. "
      "On Sunday we visited the castle and ate grilled sardines. Ana bought a blue scarf at the market. "
      "We came back late on Sunday evening.")


def test_keywords_chinese_and_english():
    zh = extract_keywords("那家素食餐厅营业时间是几点？", top_k=3)
    assert len(zh) == 3 and zh[0][1] == 1.0 and {"营业时间", "素食", "餐厅"} & {w for w, _ in zh}
    assert {w for w, _ in extract_keywords("那家素食餐厅营业时间是几点？", method="textrank")} & {"餐厅", "营业时间"}
    en = dict(extract_keywords("When did Caroline go to the LGBTQ support group in 2023?", top_k=5))
    assert "caroline" in en and "2023" in en and not {"when", "did", "the", "to"} & set(en)
    assert extract_keywords("  ") == []
    with pytest.raises(ValueError, match="method"):
        extract_keywords("x", method="bm25")


def test_sentence_split_and_details():
    assert len(split_sentences(ZH)) == 7 and len(split_sentences(EN)) == 7
    d = salient_details(EN)
    assert "7:30 am" in d["dates"] and "3" in d["numbers"] and "Lisbon" in d["names"]
    assert "5月8日" in salient_details(ZH)["dates"] and "380" in salient_details(ZH)["numbers"]


@pytest.mark.parametrize("text,budget", [(ZH, 60), (ZH, 90), (EN, 45), (EN, 70)])
def test_extractive_summary_fits_keeps_order_and_names_what_it_dropped(text, budget):
    counter = HeuristicTokenCounter()
    out = ExtractiveSummarizer(counter).summarize(text, max_tokens=budget)
    assert counter.count_tokens(out) <= budget
    body, missing = out.rsplit("\n", 1)
    assert missing.startswith("本摘要可能缺失" if detect_language(text) == "cn" else "May be missing")
    kept = [s for s in split_sentences(text) if s in body]
    assert kept and [text.index(s) for s in kept] == sorted(text.index(s) for s in kept)  # original order
    # the line names only details that really are in the text and were really dropped from the body
    listed = [x.strip() for part in missing.split(":", 1)[1].replace("、", ";").split(";") if "(" in part
              for x in part[part.index("(") + 1:part.rindex(")")].split(",")]
    assert listed and all(x in text and x not in body for x in listed)


def test_tiny_budget_still_fits():
    counter = HeuristicTokenCounter()
    for budget in (5, 12, 20):
        out = ExtractiveSummarizer(counter).summarize(EN, max_tokens=budget)
        assert 0 < counter.count_tokens(out) <= budget


def test_short_text_is_returned_whole():
    assert ExtractiveSummarizer().summarize("Short note. Nothing else.", max_tokens=100) == "Short note. Nothing else."


def test_llm_summarizer_uses_the_seed_prompt():
    seen = {}

    def gen(prompt, max_new_tokens):
        seen["prompt"], seen["n"] = prompt, max_new_tokens
        return "  提到了云南旅行。  "

    assert LLMSummarizer(gen).summarize(ZH, max_tokens=50) == "提到了云南旅行。"
    assert "不得推理或补充" in seen["prompt"] and "不超过50字" in seen["prompt"] and seen["n"] == 50


def test_heuristic_token_counter():
    c = HeuristicTokenCounter()
    assert c.count_tokens("") == 0 and c.count_tokens("我不吃辣") == 4
    assert c.count_tokens(c.truncate(EN, 10)) <= 10 and EN.startswith(c.truncate(EN, 10))
