"""The keys file: only hashes are stored, written atomically; a bad file is refused naming the problem."""
import stat

import pytest

from dkilab.config import ConfigError
from dkilab.service.keys import KeyRing, add_key, hash_key, read_keys


def test_keys_are_stored_hashed_and_map_to_their_user(tmp_path):
    path = tmp_path / "keys.yaml"
    k1, k2 = add_key(path, "alice", "laptop"), add_key(path, "bob")
    text = path.read_text()
    assert k1 not in text and k2 not in text and hash_key(k1) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ring = KeyRing(read_keys(path))
    assert ring.user_for(k1) == "alice" and ring.user_for(k2) == "bob" and len(ring) == 2
    for bad in (None, "", k1[:-1], k1 + "x", hash_key(k1), "x" * 10_000):
        assert ring.user_for(bad) is None


@pytest.mark.parametrize("content,needle", [
    ("keys: [{user_id: alice, sha256: nothex}]", "keys.0.sha256"),
    ("keys: [{user: alice, sha256: " + "a" * 64 + "}]", "keys.0.user"),
    ("keys: [{user_id: a, sha256: " + "a" * 64 + "}, {user_id: b, sha256: " + "a" * 64 + "}]", "listed twice"),
    ("keys: [unclosed", "keys.yaml"),
])
def test_a_malformed_keys_file_is_refused_naming_the_key(tmp_path, content, needle):
    path = tmp_path / "keys.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        read_keys(path)
    with pytest.raises(ConfigError, match="keys.yaml"):
        add_key(path, "carol")  # an unreadable file is not overwritten
    assert path.read_text() == content


def test_serve_refuses_a_missing_store_or_an_empty_keys_file(tmp_path):
    from dkilab.service.server import serve

    (tmp_path / "keys.yaml").write_text("keys: []")
    with pytest.raises(ConfigError, match="holds no keys"):
        serve(str(tmp_path / "store"), str(tmp_path / "keys.yaml"))
    add_key(tmp_path / "keys.yaml", "alice")
    with pytest.raises(ConfigError, match="does not exist.*dkilab ingest"):
        serve(str(tmp_path / "store"), str(tmp_path / "keys.yaml"))
    assert not (tmp_path / "store").exists()  # nothing created
