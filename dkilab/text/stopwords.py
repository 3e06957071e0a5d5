"""Function words dropped from keyword queries (English and Chinese)."""

_EN = """
a about above after again against all am an and any are aren't as at be because been before being
below between both but by can can't could couldn't did didn't do does doesn't doing don't down during
each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
let's me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves
out over own same shan't she she'd she'll she's should shouldn't so some such than that that's the
their theirs them themselves then there there's these they they'd they'll they're they've this those
through to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when
when's where where's which while who who's whom why why's with won't would wouldn't you you'd you'll
you're you've your yours yourself yourselves will just also s t get got did does
"""

_CN = """
的 了 和 是 就 都 而 及 与 着 或 一个 没有 我们 你们 他们 她们 它们 这个 那个 这些 那些 这样 那样 之 把 被 让 给
在 也 很 吗 呢 吧 啊 呀 哦 嗯 么 什么 怎么 为什么 哪 哪里 哪个 谁 我 你 他 她 它 自己 还 又 从 对 向 到 于 以 为
上 下 中 里 但 但是 如果 因为 所以 然后 可以 会 能 要 想 说 过 来 去 有 个 这 那 些 地 得 等 请 问 呃
"""

STOPWORDS: frozenset[str] = frozenset(_EN.split()) | frozenset(_CN.split())
