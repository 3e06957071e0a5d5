"""Can an embedding tell a conflicting pair of a user's statements from an unrelated one (issue 87)? Prints the cosine
of each pair under each offline encoder: conflicting pairs (the car, the cat, the editor) and unrelated pairs of one
user. docs/agents.md: e5 puts the first at 0.875-0.934 and the second at 0.773-0.901, so the rules find conflicts by
slot instead.

    .venv/bin/python experiments/bench/conflict_cosines.py
"""
from dkilab.memory import Embedder

RELATED = [("我开的是一辆白色丰田卡罗拉。", "上周我把丰田卖了，换了一辆特斯拉Model 3。"),
           ("上周我把丰田卖了，换了一辆特斯拉Model 3。", "现在开特斯拉。"),
           ("我开的是一辆白色丰田卡罗拉。", "现在开特斯拉。"),
           ("我养了一只橘猫。", "我的猫去年走了，现在养了一条柯基。"),
           ("I write all my code in Vim.", "I switched to VS Code last month."),
           ("I drive a red Honda Civic.", "I sold my Honda and bought a Tesla."),
           ("I have a cat named Luna.", "Luna passed away, now I have a dog called Max.")]
UNRELATED = [("我住在杭州。", "我现在每天都喝绿茶。"),
             ("I live in Boston.", "These days I drink green tea every afternoon."),
             ("我开的是一辆白色丰田卡罗拉。", "我现在在腾讯上班。"),
             ("I write all my code in Vim.", "I now work at Stripe."),
             ("I have a cat named Luna.", "I moved to Denver last month."),
             ("我养了一只橘猫。", "我现在住在上海。")]


def main() -> None:
    for name in ("offline:e5", "offline:minilm", "offline:minilm-locomo"):
        e = Embedder(name)
        for label, pairs in (("conflicting", RELATED), ("unrelated", UNRELATED)):
            cos = [float(a @ b) for a, b in (e.encode([x, y]) for x, y in pairs)]
            print(f"{name:24s} {label:12s} {min(cos):.3f}-{max(cos):.3f}  " + " ".join(f"{c:.3f}" for c in cos))


if __name__ == "__main__":
    main()
