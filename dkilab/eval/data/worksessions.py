"""Work sessions (generated in code by the dkilab authors; the project's licence): long user–assistant
working sessions in English, with questions about what was instructed or answered many sessions earlier.

The public dev data (LoCoMo persona chat, MemDaily, MADial-Bench snippets) has short turns. This set has the
other kind: each of `USERS` users works with an assistant on a software project over
`SESSIONS` sessions, a day or more apart. The user's turns are requests and instructions (a port, a
timeout, a reviewer, a schedule, a convention); the assistant's are long answers (a numbered plan, a code
block, an explanation: 250-500 words) in which the answer to a later question is one sentence or one line.
Every service, setting and name recurs across the sessions in other contexts, and every kind of fact is
stated for several services, so a question is told apart by its service and its kind, not by a rare word.
Some facts change in a later session ("Change of plan: ..."); the question then asks for the current value
and its evidence is both statements.

Questions (`QUESTIONS_PER_USER` per user) are asked an hour after the last session, which states none of
the facts they ask about; their wording is not the statement's (templates on both sides, synonyms). The
evidence of each is the message ids that state the fact. Message ids: `{user}:s{session}#{index}`.
Deterministic: the same conversations from the same code (the dataset's version is in every cell's identity).
The split is the registry's: `dev` the first half of the users, `test` the second.
"""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from dkilab.eval.data.base import register_dataset
from dkilab.types import Conversation, Message, QAItem

USERS = 24
SESSIONS = 14
QUESTIONS_PER_USER = 12
EPOCH = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)

SERVICES = ["billing API", "ingest worker", "auth gateway", "search indexer", "report scheduler",
            "notification service", "upload client", "metrics exporter", "checkout frontend",
            "inventory sync job", "CSV importer", "webhook relay", "invoice renderer", "audit logger"]
PEOPLE = ["Priya", "Marcus", "Elena", "Tomasz", "Aiko", "Daniel", "Fatima", "Jonas", "Lucia", "Wei"]
QUEUES = ["RabbitMQ", "Kafka", "Redis Streams", "Amazon SQS", "NATS JetStream", "Google Pub/Sub"]
STORES = ["PostgreSQL", "SQLite", "DynamoDB", "MongoDB", "ClickHouse", "MySQL"]
VERBS = ["normalize", "validate", "merge", "parse", "render", "batch", "dedupe", "reconcile", "sign", "throttle"]
NOUNS = ["invoice_rows", "webhook_payloads", "user_tokens", "csv_headers", "audit_events", "price_tiers",
         "upload_chunks", "retry_windows", "report_pages", "sku_records"]
PURPOSE = {"normalize": "normalise", "validate": "check", "merge": "combine", "parse": "read", "render": "draw",
           "batch": "group", "dedupe": "drop duplicate", "reconcile": "match up", "sign": "sign",
           "throttle": "rate-limit"}
ENV_KEYS = ["MAX_BATCH_SIZE", "FLUSH_INTERVAL_MS", "POOL_SIZE", "CACHE_TTL_S", "LOG_SAMPLE_RATE", "WORKER_COUNT"]
CONVENTIONS = ["type hints on every function and no wildcard imports", "f-strings only, never percent formatting",
               "pathlib instead of os.path", "dataclasses rather than plain dicts for records",
               "logging through structlog, never print", "pytest fixtures instead of setUp methods"]

# generic material of the long answers: plan steps, explanation sentences, code lines ({s}: a service)
STEPS = ["Add a health check endpoint to the {s} and wire it into the load balancer probe.",
         "Write an integration test that runs the {s} against a throwaway database container.",
         "Profile the slowest query of the {s} with EXPLAIN ANALYZE and add the missing index.",
         "Move the {s}'s secrets out of the repository into the vault and rotate them.",
         "Put the {s} behind a feature flag so we can turn it off without a deploy.",
         "Add structured logs around every external call the {s} makes, with the request id.",
         "Pin the {s}'s dependencies and regenerate the lock file in CI.",
         "Split the {s}'s settings into defaults and per-environment overrides.",
         "Backfill the missing rows for the {s} in batches, checkpointing after each one.",
         "Set up a dashboard for the {s}: error rate, p95 latency and queue depth.",
         "Document the {s}'s failure modes in the runbook, with the commands to recover.",
         "Run the {s}'s migration on staging first and compare row counts before and after.",
         "Replace the ad-hoc retries in the {s} with one wrapper, so every call backs off the same way.",
         "Add a canary deploy step for the {s} that watches the error budget for ten minutes."]
EXPLAIN = ["The main risk is partial writes: if the {s} dies half-way, the next run must pick up where it stopped.",
           "Keeping the {s} stateless makes it easy to scale horizontally behind the balancer.",
           "Most of the latency of the {s} is spent waiting on the database, not in Python.",
           "I would not cache aggressively in the {s} until we know how stale the data may be.",
           "The {s} port, timeout and retry settings all live in one settings module, so review them together.",
           "If the {s} has to talk to the queue, make every handler idempotent first.",
           "Error messages from the {s} should name the record id so on-call can find it quickly.",
           "A load test of the {s} with realistic payloads will tell us more than micro-benchmarks.",
           "We can keep the old code path of the {s} for one release and delete it after.",
           "The {s} schedule and its owner should be in the runbook, next to the alerts."]
REQUESTS = ["Can you draft a rollout plan for the {s}?", "The {s} keeps timing out under load. Any ideas?",
            "Could you sketch the code for the {s}'s next step?", "Let's clean up the {s} before the release.",
            "What would you change in the {s} first?", "Please review how the {s} handles failures.",
            "I need a migration plan for the {s}'s data.", "How should we test the {s} end to end?"]
ACKS = ["Thanks, that helps. Let's go with it.", "OK, I'll try that tomorrow and report back.",
        "Makes sense. Keep it short next time though.", "Good, the team liked the plan.",
        "Fine, but watch the deadline.", "Great, I merged the first part already."]

# the kinds of fact: (statement by the user or the assistant, question wordings, value pool)
FACTS = {
    "port": ("user", "Please run the {s} on port {v} from now on; the old one clashes with the proxy.",
             ["Which port did I ask you to put the {s} on?", "What port number should the {s} listen on?"],
             lambda r: str(r.randrange(8000, 9900))),
    "timeout": ("user", "Keep the {s}'s request timeout at {v} seconds, no more, whatever the upstream does.",
                ["What request timeout did I set for the {s}?", "How many seconds may a call of the {s} take?"],
                lambda r: str(r.choice([2, 3, 5, 8, 10, 12, 15, 20, 30, 45]))),
    "owner": ("user", "{v} owns the review of the {s}, so send the design notes to {v} before merging.",
              ["Who did I say reviews changes to the {s}?", "Whose approval does the {s} need before a merge?"],
              lambda r: r.choice(PEOPLE)),
    "schedule": ("user", "The {s} must run nightly at {v} UTC, after the backups finish.",
                 ["At what time should the {s}'s nightly run start?", "When does the {s} run each night?"],
                 lambda r: f"{r.randrange(0, 6):02d}:{r.choice([0, 15, 30, 45]):02d}"),
    "retries": ("assistant", "For the {s} I'd cap retries at {v} attempts, backing off exponentially from 200 ms.",
                ["How many retry attempts did you recommend for the {s}?",
                 "What retry limit did you suggest for the {s}?"],
                lambda r: str(r.randrange(2, 9))),
    "queue": ("assistant",
              "I recommend {v} as the queue between the {s} and its consumers: it gives us ordering per key.",
              ["Which message broker did you propose for the {s}?",
               "What did you suggest the {s} publish its events to?"], lambda r: r.choice(QUEUES)),
    "store": ("assistant", "Store the {s}'s state in {v}; it is what the rest of the stack already runs.",
              ["Which database did you say the {s} should keep its state in?",
               "Where should the {s} persist its data, per your advice?"],
              lambda r: r.choice(STORES)),
    "env": ("assistant", "Set {v} in the {s}'s environment to tune it; the default is too conservative.",
            ["Which environment variable did you tell me to tune for the {s}?",
             "What setting did you say to raise in the {s}'s environment?"],
            lambda r: r.choice(ENV_KEYS)),
    "function": ("assistant", "",
                 ["What did you name the function that {p}s the {n} in the {s}?",
                  "Which helper did you write to {p} the {n} for the {s}?"],
                 lambda r: f"{r.choice(VERBS)}_{r.choice(NOUNS)}"),
}
UPDATE = {"port": "Change of plan: the {s} moves to port {v}; the proxy team needs the old one.",
          "timeout": "Change of plan: raise the {s}'s timeout to {v} seconds, the upstream got slower.",
          "owner": "Change of plan: {v} takes over the {s} reviews from now on.",
          "schedule": "Change of plan: the {s} nightly run moves to {v} UTC."}


def _function(name: str) -> tuple[str, str]:
    """(what it does, to what) of a generated function's name: `batch_webhook_payloads` -> group, webhook payloads."""
    verb, noun = name.split("_", 1)
    return PURPOSE[verb], noun.replace("_", " ")


def _code(r: random.Random, s: str, fn: str | None, purpose: str) -> str:
    """A code block of 10-18 lines for service `s`; `fn`: the function it defines (with its purpose)."""
    name = fn or f"{r.choice(VERBS)}_{r.choice(NOUNS)}"
    arg = name.split("_", 1)[1]
    body = [f"def {name}({arg}, *, limit: int = {r.choice([100, 500, 1000])}):",
            f'    """{purpose[0].upper() + purpose[1:]} for the {s}."""',
            "    out = []",
            f"    for item in {arg}[:limit]:",
            "        if not item:",
            "            continue",
            "        out.append(item.strip() if isinstance(item, str) else item)",
            "    log.info(\"done\", count=len(out))",
            "    return out"]
    extra = [f"# settings of the {s} are read once at start-up",
             f"RETRY_BACKOFF_MS = {r.choice([100, 200, 250, 500])}",
             f"client = Client(base_url=settings.{s.split()[0].upper()}_URL, timeout=settings.TIMEOUT)",
             "log = structlog.get_logger(__name__)"]
    lines = r.sample(extra, r.randrange(2, 5)) + [""] + body
    return "```python\n" + "\n".join(lines) + "\n```"


def _answer(r: random.Random, s: str, others: list[str], fact: str | None, fn: str | None) -> str:
    """A long assistant answer about service `s`: plan, code, explanation; `fact` one sentence of it, `fn` the
    name of the function its code defines."""
    steps = [t.format(s=r.choice([s, s, r.choice(others)])) for t in r.sample(STEPS, r.randrange(5, 8))]
    if fact:
        steps.insert(r.randrange(1, len(steps)), fact)
    plan = "\n".join(f"{i}. {t}" for i, t in enumerate(steps, 1))
    why = " ".join(t.format(s=r.choice([s, r.choice(others)])) for t in r.sample(EXPLAIN, r.randrange(3, 5)))
    purpose = "{} the {}".format(*_function(fn)) if fn else f"clean up the {r.choice(NOUNS).replace('_', ' ')}"
    code = _code(r, s, fn, purpose)
    intro = r.choice([f"Here is how I would approach the {s}.", f"Sure. A plan for the {s}, then the code.",
                      f"Good question. For the {s} I see three parts: the plan, the code, and the risks."])
    return f"{intro}\n\n{plan}\n\n{code}\n\n{why}"


def _conversation(u: int) -> Conversation:
    r = random.Random(f"worksessions-{u}")
    uid = f"work-u{u:02d}"
    services = r.sample(SERVICES, 5)
    # facts: (kind, service, value, session) with sessions 0..SESSIONS-3 (the last two state none)
    kinds = list(FACTS)
    facts: list[dict[str, Any]] = []
    for k in range(QUESTIONS_PER_USER):
        kind = kinds[k % len(kinds)] if k < len(kinds) else r.choice(kinds)
        taken = {f["s"] for f in facts if f["kind"] == kind}
        s = r.choice([x for x in services if x not in taken] or services)
        facts.append({"kind": kind, "s": s, "v": FACTS[kind][3](r), "session": r.randrange(0, SESSIONS - 4)})
    updates = r.sample([f for f in facts if f["kind"] in UPDATE], 2)
    for f in updates:
        f["update"] = {"v": FACTS[f["kind"]][3](r), "session": r.randrange(f["session"] + 2, SESSIONS - 2)}
    msgs: list[Message] = []
    evidence: dict[int, list[str]] = {i: [] for i in range(len(facts))}
    for n in range(SESSIONS):
        sid = f"{uid}:s{n}"
        start = EPOCH + timedelta(days=n * r.choice([1, 2, 3]) + 2 * n, hours=r.randrange(0, 6))
        here = [(i, f, False) for i, f in enumerate(facts) if f["session"] == n]
        here += [(i, f, True) for i, f in enumerate(facts) if f.get("update", {}).get("session") == n]
        r.shuffle(here)
        exchanges = max(4, len(here))
        turns: list[tuple[str, str, int | None]] = []  # (role, text, index of the fact it states)
        for x in range(exchanges):
            i, f, upd = here[x] if x < len(here) else (None, {}, False)
            s = f["s"] if f else r.choice(services)
            others = [o for o in services if o != s]
            request = r.choice(REQUESTS).format(s=s) if x == 0 or r.random() < 0.5 else r.choice(ACKS)
            if f and upd:
                turns += [("user", f"{UPDATE[f['kind']].format(s=s, v=f['update']['v'])} {request}", i),
                          ("assistant", _answer(r, s, others, None, None), None)]
            elif f and FACTS[f["kind"]][0] == "user":
                turns += [("user", f"{request} {FACTS[f['kind']][1].format(s=s, v=f['v'])}", i),
                          ("assistant", _answer(r, s, others, None, None), None)]
            elif f and f["kind"] == "function":
                turns += [("user", request, None), ("assistant", _answer(r, s, others, None, f["v"]), i)]
            elif f:
                turns += [("user", request, None),
                          ("assistant", _answer(r, s, others, FACTS[f["kind"]][1].format(s=s, v=f["v"]), None), i)]
            else:
                turns += [("user", request, None), ("assistant", _answer(r, s, others, None, None), None)]
        for j, (role, text, i) in enumerate(turns):
            mid = f"{sid}#{j}"
            msgs.append(Message(mid, uid, sid, j // 2, role, text, start + timedelta(minutes=3 * j)))
            if i is not None:
                evidence[i].append(mid)
    asked = msgs[-1].timestamp + timedelta(hours=1)
    last = msgs[-1].session_id
    questions = []
    for i, f in enumerate(facts):
        does, what = _function(f["v"]) if f["kind"] == "function" else ("", "")
        q = r.choice(FACTS[f["kind"]][2]).format(s=f["s"], p=does, n=what)
        answer = f.get("update", {}).get("v", f["v"])
        questions.append(QAItem(q, answer, f["kind"], evidence[i], True, asked, qid=f"{uid}:q{i}", session_id=last))
    return Conversation(uid, uid, msgs, questions, language="en", speakers={"user": "User", "assistant": "Assistant"})


@register_dataset("worksessions", language="en", scorer="f1", version="1", sources=(str(Path(__file__).resolve()),))
def load_worksessions(data=None, limit: int | None = None, question_limit: int | None = None) -> list[Conversation]:
    """`data` is not used: the conversations are generated by this module."""
    out = [_conversation(u) for u in range(USERS)][:limit]
    for c in out:
        c.questions = c.questions[:question_limit]
    return out
