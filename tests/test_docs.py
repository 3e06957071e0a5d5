"""The README reads in layers (issue 34 item 15): the two commands, a one-page tour, then reference pages
under docs/; every link between them resolves; a timing claim names the command that measures it."""
import re

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a measured duration ("took 12 s", "in 3.5 min", "runs in under 2 minutes", "p50 9.8 ms")
TIMING = re.compile(r"(?:took|in under|runs? in|takes?|p50|p95)\s+(?:about\s+|~)?\d[\d,.]*\s?(?:ms|s|min|minutes|seconds)\b")
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
