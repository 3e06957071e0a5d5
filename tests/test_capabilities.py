"""Capabilities are declared, not probed (issue 88): no code asks a model, memory, store, embedder or strategy
for a named member with getattr / hasattr; it asks `isinstance` against the protocols in dkilab/types.py (and
`embedder.OwnEncoder`). The two probes left are on third-party objects, named here with why."""
import ast
from pathlib import Path

from tests.conftest import ROOT

# what holds a dkilab model, memory, store, embedder or strategy, by the name the code gives it
SEAMS = {"model", "memory", "store", "mem", "embedder", "instance", "strategy", "chat", "llm", "served"}
PROBES = ("getattr", "hasattr")
ALLOWED = {
    # the torch module inside a KV-capable model: its dtype keys the response cache
    ("dkilab/models/response_cache.py", "getattr(model.model, 'dtype', '')"),
    # a sentence-transformers model: 5.x renamed get_sentence_embedding_dimension
    ("dkilab/encoders/embedder.py", "getattr(model, 'get_embedding_dimension', None)"),
}


def probes(root: Path):
    """(file, call) of every getattr / hasattr that names a member of something held under a seam name."""
    for path in sorted((root / "dkilab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
            if call and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                held = node.args[0]
                name = held.id if isinstance(held, ast.Name) else held.attr if isinstance(held, ast.Attribute) else None
                if name in SEAMS:
                    yield str(path.relative_to(root)), ast.unparse(node)


def test_no_model_or_memory_capability_is_probed_by_name():
    assert set(probes(ROOT)) == ALLOWED


def test_the_check_finds_a_probe(tmp_path):
    (tmp_path / "dkilab").mkdir()
    (tmp_path / "dkilab" / "x.py").write_text("def f(memory, self):\n    return hasattr(memory, 'vectors') or "
                                              "getattr(self.model, 'generate_batch', None)\n")
    assert set(probes(tmp_path)) == {("dkilab/x.py", "hasattr(memory, 'vectors')"),
                                     ("dkilab/x.py", "getattr(self.model, 'generate_batch', None)")}
