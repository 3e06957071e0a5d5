"""Caches that stand for a file's content are keyed by its bytes (issue 85 items 3 and 4): a file edited to the same
size with its mtime put back (`touch -r`, `cp -p`, `rsync -a`, `tar x`) is read again, never served from a cache
of the old bytes: the dataset's Arrow cache, the dequantised GGUF's directory, and the in-process digests."""
import json
import os
import time

from dkilab.cache import file_digest
from dkilab.eval.data import load_dataset, source_digest
from dkilab.models.specs import _gguf_cache

from tests.conftest import ROOT

DIALOGUES = ROOT / "tests" / "data" / "scripted" / "dialogues.json"


def _same_size_edit(path, old: bytes, new: bytes):
    """Replace `old` by `new` (same length) in the file and put its mtime back, as `cp -p` or `rsync -a` would."""
    assert len(old) == len(new)
    st = os.stat(path)
    time.sleep(0.02)  # past the kernel's timestamp tick, as any real edit is
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)  # what a stat-keyed cache sees: no change


def test_a_dataset_edited_to_the_same_size_and_mtime_gives_its_new_golds(tmp_path, monkeypatch):
    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data.json"
    data.write_text(DIALOGUES.read_text())
    gold = json.loads(data.read_text())["conversations"][0]["questions"][0]["answer"]
    before = source_digest("mine", path=str(data))
    assert load_dataset("mine", path=str(data))[0].questions[0].answer == gold  # now in the Arrow cache
    edited = ("X" * len(gold)) if gold != "X" * len(gold) else "Y" * len(gold)
    _same_size_edit(data, json.dumps(gold).encode(), json.dumps(edited).encode())
    assert source_digest("mine", path=str(data)) != before  # a new cell ...
    assert load_dataset("mine", path=str(data))[0].questions[0].answer == edited  # ... with the new golds


def test_other_weights_of_the_same_size_and_mtime_get_their_own_dequantised_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    first = _gguf_cache(gguf)
    _same_size_edit(gguf, bytes(range(8)), bytes(range(8, 16)))
    assert _gguf_cache(gguf) != first and _gguf_cache(gguf).parent == first.parent


def test_a_files_digest_in_one_process_follows_its_bytes_not_its_size_and_mtime(tmp_path):
    f = tmp_path / "prompts.yaml"
    f.write_text("judge: answer yes\n")
    first = file_digest(f)
    assert file_digest(f) == first  # memoised
    _same_size_edit(f, b"yes", b"not")
    assert file_digest(f) != first


def test_an_incomplete_dequantised_directory_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    """A directory in the cache holding the tokenizer without the config and weights (seen after two runs built one
    model at once) was returned as it was, and every cell on the model failed to load it."""
    import transformers
    from dkilab.models.specs import _dequantised

    from tests.models.tiny import tiny_model

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    hf, tok = tiny_model("llama")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: hf)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    broken = _gguf_cache(gguf)
    broken.mkdir(parents=True)
    tok.save_pretrained(broken)  # a tokenizer alone
    assert not (broken / "config.json").exists()
    built = _dequantised(gguf)
    assert built == broken and (built / "config.json").is_file() and list(built.glob("*.safetensors"))
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # nothing left beside it
