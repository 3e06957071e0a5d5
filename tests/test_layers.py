"""The layers of docs/architecture.md: a module imports only from its own layer and those below it, at the top
of the file or inside a function alike (an import that waits for its call still ties the layers together)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# lowest first, as docs/architecture.md lists them; a top-level name not listed is an entry point. `eval` is five
# layers, one per package (`eval.data` ... `eval.harness`); `dkilab.eval` itself holds only its docstring
LAYERS = [("prompts",), ("types",), ("config", "registry", "cache", "tracing", "weights", "progress"), ("text",),
          ("encoders",), ("memory",), ("models",), ("recall",), ("agents",), ("strategies",), ("eval.data",),
          ("eval.scoring",), ("eval.tracking",), ("eval.views",), ("eval.harness",)]
ENTRY = len(LAYERS)


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "dkilab":
        return None
    if len(parts) == 1:
        return ENTRY
    name = ".".join(parts[1:3]) if parts[1] == "eval" else parts[1]
    return next((i for i, names in enumerate(LAYERS) if name in names), ENTRY)


def imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from dkilab import prompts` imports dkilab.prompts
            # (its metadata, `__version__`, belongs to no layer)
            out += ([f"dkilab.{a.name}" for a in node.names if not a.name.startswith("__")] if node.module == "dkilab"
                    else [node.module])
    return out


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in sorted((ROOT / "dkilab").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mine = layer(module)
        for name in imports(path):
            other = layer(name)
            if other is not None and other > mine and not (mine == ENTRY and other == ENTRY):
                upward.append(f"{module} imports {name}")
    assert upward == []


def test_the_layers_are_the_ones_the_architecture_page_lists():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| layer | package |"):text.index("\n\n", text.index("| layer | package |"))]
    rows = [r.split("|")[1].strip() for r in table.splitlines()[2:]]
    assert rows == ["prompts", "types", "config", "text", "encoders", "memory", "models", "recall", "agents",
                    "strategies", "eval.data", "eval.scoring", "eval.tracking", "eval.views", "eval.harness",
                    "entry points"]


def test_eval_is_its_five_packages_and_no_file_in_them_is_over_400_lines():
    eval_dir = ROOT / "dkilab" / "eval"
    assert sorted(p.name for p in eval_dir.iterdir() if p.is_dir() and p.name != "__pycache__") == \
        ["data", "harness", "scoring", "tracking", "views"]
    assert [p.name for p in eval_dir.glob("*.py")] == ["__init__.py"]
    long = {str(p.relative_to(eval_dir)): n for p in sorted(eval_dir.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_no_two_modules_import_each_other_round_a_circle():
    """Within dkilab, the module import graph (top-level and function imports alike) has no cycle: a model backend
    registers itself and reads where weights are from `models.specs`, never from the loader that imports it."""
    import networkx as nx

    graph = nx.DiGraph()
    for path in sorted((ROOT / "dkilab").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for name in imports(path):
            if name.startswith("dkilab.") and name != module:
                graph.add_edge(module, name)
    package_inits = {n for n in graph if any(m.startswith(n + ".") for m in graph)}
    cycles = [c for c in nx.simple_cycles(graph.subgraph(n for n in graph if n not in package_inits))]
    assert sorted(" -> ".join(c) for c in cycles) == []
