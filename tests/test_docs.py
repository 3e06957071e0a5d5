"""The README reads in layers (issue 34 item 15): the two commands, a one-page tour, then reference pages
under docs/; every link between them resolves; a timing claim names the command that measures it."""
import re

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a measured duration ("took 12 s", "in 3.5 min", "runs in under 2 minutes", "p50 9.8 ms")
TIMING = re.compile(
    r"(?:took|in under|runs? in|takes?|p50|p95)\s+(?:about\s+|~)?\d[\d,.]*\s?(?:ms|s|min|minutes|seconds)\b")
COMMAND = re.compile(r"`(?:dkilab |make |\.venv/bin/|python |pytest |accelerate )[^`]*`")


def test_the_readme_is_two_commands_a_tour_and_links():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    heads = re.findall(r"(?m)^## (.+)$", text)
    assert heads == ["Two commands", "A one-page tour", "Reference"]
    assert len(text.splitlines()) < 200  # it was 1,553 lines
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", text))
    assert {f"docs/{p.name}" for p in PAGES[1:]} <= linked  # every reference page is reachable from it


def test_every_relative_link_and_picture_resolves():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_a_timing_claim_names_its_command():
    """Each paragraph that states a measured duration names the command that measured it (in itself or in
    the paragraph, table or list it belongs to, up to its heading)."""
    bad = []
    for page in PAGES:
        section_cmd = False
        for para in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
            if para.lstrip().startswith("#"):
                section_cmd = False
            section_cmd = section_cmd or bool(COMMAND.search(para))
            if TIMING.search(para) and not section_cmd:
                bad.append(f"{page.name}: {para.strip()[:100]!r}")
    assert not bad, bad


def test_the_readmes_retrieval_table_is_the_bench_output_in_the_docs():
    """The README's recall@10 table is read off the `dkilab bench retrieval --peers` output pasted in
    docs/retrieval.md, to the digit: the defaults, previous defaults, stock MiniLM, the better single signal
    and both peers, on every split; its held-out column off the `--leave-one-dataset-out` output there."""
    docs = (ROOT / "docs" / "retrieval.md").read_text(encoding="utf-8")
    out = docs[docs.index("$ dkilab bench retrieval --peers"):]
    out = out[:out.index("```")]
    lines = out.splitlines()
    head = next(x for x in lines if x.startswith("dataset ")).split()[1:]  # the methods' columns
    bench = {}
    for line in lines:
        m = re.match(r"(\S+):test\s+(\d\.\d{3}) ±", line)
        if m:  # the method table: each method's value is the first number of its column
            # each method's value is the first number of its column; '' for a column it does not run on ("-")
            bench[m.group(1)] = dict(zip(head, re.findall(r"(\d\.\d{3}) [±\[]|\s-(?=\s|$)", line)))
        m = re.match(r"(\S+):test\s+recall_at_10\s+\S+ ±\S+\s+\S+ ±\S+\s+(\S+) ±\S+\s+(\S+) ±", line)
        if m:  # the peers table
            bench[m.group(1)] |= {"engram_search": m.group(2), "rank_bm25": m.group(3)}
    lodo = docs[docs.index("$ dkilab bench retrieval --leave-one-dataset-out"):]
    held: dict[str, dict[str, str]] = {}  # the held-out column: the leave-one-dataset-out output, to the digit
    for block in re.split(r"(?m)^(?=\S+ \(\d+ questions)", lodo[:lodo.index("```")])[1:]:
        held[block.split()[0]] = dict(re.findall(r"(?m)^  (lodo_\w+)\s+(\d\.\d{3})", block))
    names = {"LoCoMo (convs 5-9)": "locomo", "MemDaily": "memdaily", "MADial-Bench zh": "madial_bench_zh",
             "MADial-Bench en": "madial_bench_en", "Work sessions": "worksessions",
             "LoCoMo by session": "locomo_sessions"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"(?m)^\| (LoCoMo \(convs 5-9\)|MemDaily|MADial-Bench zh|MADial-Bench en|"
                      r"Work sessions|LoCoMo by session) \| (.+) \|$",
                      readme)
    assert len(rows) == len(names)
    for split, cells in rows:
        b = bench[names[split]]
        got = [c.strip().strip("*") for c in cells.split("|")]
        single = max(("bm25_only", "dense_only"), key=lambda k: float(b[k]))
        want = [b["defaults"], f"{held[names[split]]['lodo_parts_guarded']} / {held[names[split]]['lodo_parts']}",
                b["previous_defaults"], b["stock_minilm"],
                f"{b[single]} ({single.split('_')[0].replace('bm25', 'BM25')})", b["engram_search"], b["rank_bm25"]]
        assert got == want, split
