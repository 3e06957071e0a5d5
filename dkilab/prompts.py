"""Every prompt text dkilab sends to a model, in one place. Strategies, formatters, summaries,
the harness's multiple-choice line, the judge, the agents' policies and the session flow import their texts
from here; a cell's identity hashes every text it can reach (`Strategy.prompts`, `Cell.harness_prompts`,
the judge block), so editing one here runs again exactly the cells that send it
(tests/eval/harness/test_prompts_in_hash.py edits each in turn). Texts only: no logic, and no imports, so every
module can import it.
"""
from __future__ import annotations

# --- what the system prompt asks a model to reply when the memory has no answer (the abstention detector
# recognises it exactly) --------------------------------------------------------------------------------
ABSTAIN_PHRASE = {"en": "Not mentioned.", "cn": "没有提到。"}

# --- the harness: a multiple-choice question reaches the strategy with its options and this line ---------
CHOOSE = {"cn": "请只回答一个选项的字母。", "en": "Answer with the letter of one option."}


# --- every strategy that generates: the system prompt, the question and the history heads ---
SYSTEM = {
    "en": "You are a helpful assistant who remembers earlier conversations with the user. Answer in one short "
          f"sentence. If the memory does not contain the answer, reply exactly: {ABSTAIN_PHRASE['en']}",
    "cn": f"你是一个记得与用户过往对话的助手。请用一句话简短回答。如果记忆中没有答案，请只回答：{ABSTAIN_PHRASE['cn']}",
}
HISTORY_HEAD = {"en": "Conversation history:", "cn": "对话历史："}
QUESTION = {"en": "Question: {q}", "cn": "问题：{q}"}
PREFERENCES_HEAD = {"en": "What the user has told us about themselves:", "cn": "用户的偏好与情况："}


# --- recall_v4's formatters (seed recall-v4 §2.4, §4.5): the trust-and-reasoning constraint, the query, fact rounds ---
CONSTRAINT = {
    "cn": ("[可信+推理限定]\n以上 [SUMMARY] 为摘要，非完整事实记录。\n若回答需要精确原话/数据/时间顺序/因果关系，\n"
           "且摘要中未明确包含，\n请调用 {call}\n获取原始记录。不得基于摘要进行推理。\n[/可信+推理限定]"),
    "en": ("[TRUST AND REASONING RULES]\nThe [SUMMARY] items above are summaries, not complete factual records.\n"
           "If the answer needs exact wording, numbers, dates, time order or causes\n"
           "that the summaries do not state explicitly,\ncall {call}\n"
           "to get the original record. Do not reason from the summaries.\n[/TRUST AND REASONING RULES]"),
}
# the tool schema offered through a chat template (fact_call.protocol: native)
RETRIEVE_FACT_TOOL = {
    "type": "function",
    "function": {
        "name": "retrieve_fact",
        "description": "Return the original records behind a [SUMMARY] trace_id: `limit` messages from `offset`. "
                       "Call it when the answer needs exact wording, numbers, dates, order or causes that the "
                       "summary does not state.",
        "parameters": {
            "type": "object",
            "properties": {
                "trace_id": {"type": "string", "description": "the trace_id of a [SUMMARY] item"},
                "offset": {"type": "integer", "description": "first record to return", "default": 0},
                "limit": {"type": "integer", "description": "how many records to return", "default": 5},
            },
            "required": ["trace_id"],
        },
    },
}
# DeepSeek's system prompt registers the tool (prompt_formatter: deepseek)
DEEPSEEK_TOOLS = {"en": ("Tools: retrieve_fact(trace_id: string, offset: integer = 0, limit: integer = 5) — returns "
                         "the original records behind a [SUMMARY] trace_id, `limit` items from `offset`."),
                  "cn": ("工具：retrieve_fact(trace_id: string, offset: integer = 0, limit: integer = 5)，返回 "
                         "[SUMMARY] trace_id 背后的原始记录，从第 offset 条起取 limit 条。")}
# how the constraint names the call when the tool is native ({args}: its JSON arguments)
NATIVE_CALL = {"cn": "retrieve_fact 工具，参数 {args}", "en": "the retrieve_fact tool with {args}"}
QUERY = {"cn": "用户当前问题: {query}", "en": "Current user question: {query}"}
FOLLOW_UP = {"cn": "请基于以上补充事实回答用户问题。", "en": "Answer the user's question based on the facts above."}
# the forced last generation of the fact loop (rounds or fact budget spent)
FINAL = {"cn": "不能再调用 retrieve_fact。请现在根据已有信息直接回答用户问题。",
         "en": "You cannot call retrieve_fact again. Answer the user's question now from what you have."}
NOT_FOUND = {"cn": "未找到 trace_id={trace_id} 的原始记录。", "en": "No original record found for trace_id={trace_id}."}


# --- per-message summaries written by the model (recall.summary.strategy: llm) ---
LLM_SUMMARY_PROMPT = {
    "cn": ("请将以下对话内容压缩为不超过{max_tokens}字的摘要。\n要求:\n- 仅提取事实性陈述，不得推理或补充\n"
           "- 标注不确定或可能遗漏的信息\n- 使用\"提到了\"\"讨论了\"等不确定措辞\n\n原文:\n{text}\n\n摘要:"),
    "en": ("Compress the following conversation content into a summary of at most {max_tokens} tokens.\n"
           "Requirements:\n- Extract factual statements only; do not infer or add anything\n"
           "- Mark information that is uncertain or may be missing\n- Use hedged wording such as \"mentioned\", "
           "\"discussed\"\n\nOriginal:\n{text}\n\nSummary:"),
}


# --- the recall agent's memory view as the answering model reads it ---
VIEW_HEAD = {"en": "What the user's memory shows (recall agent):", "cn": "用户记忆（回忆 Agent 整理）："}
VIEW_KIND = {"en": {"preferences": "preference", "profile": "profile", "constraints": "constraint"},
        "cn": {"preferences": "偏好", "profile": "背景", "constraints": "约束"}}
VIEW_UNCERTAIN = {"en": " (uncertain: conflicting evidence)", "cn": "（不确定：证据矛盾）"}


# --- the recall agent's LLM policy (seed recall-agent §3-§4): plan the next call, write the view ---
AGENT_PLAN = """{skill}

Question: {question}
Hypotheses: {hypotheses}
Search window: {since} .. {until}, role: {role}
Tools:
{tools}
Calls so far:
{calls}
Results of the last call (id | role | date | text):
{results}
Reply with exactly one tool call, e.g. {example}
or the word STOP when every hypothesis has evidence or has been shown empty."""
AGENT_SYNTH = """Question: {question}
Messages you have seen (id | role | date | text):
{found}
Write what these messages say about the user as JSON: {{"preferences": [...], "profile": [...], "constraints": [...]}},
each item {{"statement": "...", "evidence_ids": ["<id>"], "confidence": 0.0-1.0}}. Use only the ids above.
Where statements conflict, the later and more explicit one wins: give the earlier item "superseded_by": "<the later
item's id>"; where neither is clearly later and more explicit (a hedge against a firm statement, two firm
contradictions), keep both with "uncertain": true.
JSON:"""


# --- semantic pointers (seed semantic-pointer §3.4.1, §3.4.2): detection and synthesis ---
POINTER_DETECT_PROMPT = """你是一个语义分析器。请分析以下文本，识别其中的模糊引用（代词、指示词等）。

【文本】
{text}

【输出格式】
JSON 数组，包含所有模糊引用：
["该用户", "他", "这个", ...]

如果没有模糊引用，输出空数组 []"""
POINTER_SYNTH_PROMPT = """你是一个语义消歧助手。请根据父级上下文，将模糊的参数描述转化为精确的语义描述。

【当前参数】
参数名: {param_name}
原始描述: {original_desc}

【当前任务上下文】
{current_context}

【父级业务记忆】（从近到远）
{ancestor_contexts}

【任务】
1. 分析原始描述中是否存在模糊引用（如"该用户"、"他"、"这个订单"）
2. 从父级记忆中找到对应的精确信息
3. 生成一个自包含的语义描述，使得仅凭此描述就能精确定位数据

【输出格式】
{{
    "resolved_desc": "完整的语义描述，包含所有必要的限定条件",
    "confidence": 0.0-1.0,
    "resolution_chain": ["从父级1获取的信息", "从父级2获取的信息", ...]
}}

【示例】
输入: param_name="client_id", original_desc="该用户的ID"
父级记忆: "任务目标：处理昨天的第二个客户的投诉"
输出: {{
    "resolved_desc": "昨天第二个需要处理投诉的客户的ID",
    "confidence": 0.9,
    "resolution_chain": ["父级任务目标：处理昨天的第二个客户的投诉"]
}}"""


# --- the session flow's answer step (seed session-l1-l2-memory) ---
FLOW_ANSWER = {
    "cn": ("你是银行信贷业务助手。根据下面的资料，用一句话回答问题。", "资料：", "问题：{q}"),
    "en": ("You assist bank credit staff. Answer the question in one sentence from the documents below.",
           "Documents:", "Question: {q}"),
}


# --- the session flow's L1 rewrite step ---
REWRITE_PROMPT = {
    "cn": ("你负责改写用户的问题：结合对话历史补全省略的业务对象和指代，使问题脱离上下文也能看懂。"
           "只输出改写后的一句问题。", "对话历史：", "当前问题：{q}\n改写后的问题："),
    "en": ("Rewrite the user's last question so that it can be understood without the conversation: fill in "
           "the business object and anything it refers to. Output only the rewritten question.",
           "Conversation:", "Question: {q}\nRewritten question:"),
}


# --- the session flow's intent and entity extraction step ---
INTENT_PROMPT = {
    "cn": ("你是银行信贷系统的意图识别助手。识别用户问题的意图，并抽取关键实体。只输出一个JSON对象，"
           "字段为 intent, active_domain（列表）, business_object, operation_stage；不知道的字段填 null。\n"
           "可选值：\n{values}", "当前业务状态：{state}\n", "问题：{q}\nJSON："),
    "en": ("You recognise the intent of questions to a bank's credit system and extract the key entities. Output "
           "only one JSON object with the fields intent, active_domain (a list), business_object, operation_stage; "
           "use null for what you do not know.\nAllowed values:\n{values}", "Current business state: {state}\n",
           "Question: {q}\nJSON:"),
}


# --- the LLM judge: correctness and abstention ---
# the judges' prompts are kept byte for byte (they are in every judged cell's identity): long lines stay
JUDGE_PROMPT = """Label a generated answer to a question as CORRECT or WRONG. You get the question, the gold answer and the generated answer.
Be generous: the generated answer is CORRECT if it states the same fact or touches the same topic as the gold answer, even if it is longer; a date in another format is CORRECT if it names the same date. It is WRONG if it gives a different fact, says it does not know, or does not answer.

Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

Reply with one word: CORRECT or WRONG."""  # noqa: E501
ABSTENTION_PROMPT = """Does the answer below decline to answer, saying the information is not available (not mentioned, unknown, not in the conversation), without giving any answer of its own? An answer that gives any content, even hedged, does not decline.

Question: {question}
Answer: {prediction}

Reply with one word: DECLINES or ANSWERS."""  # noqa: E501
