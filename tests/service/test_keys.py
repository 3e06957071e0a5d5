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


def _add(args):
    path, user = args
    return user, add_key(path, user)


def _revoke(args):
    from dkilab.service.keys import revoke_keys

    path, user = args
    return [e.user_id for e in revoke_keys(path, user)]


def test_concurrent_adds_and_revokes_lose_nothing(tmp_path):
    """Issue 58 item 4: `keys add` and `keys revoke` raced in separate processes lost revocations and printed
    keys, and once corrupted the file. Each now holds the file's lock and writes a temp file of its own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    path = tmp_path / "keys.yaml"
    old = {f"old{i}": add_key(path, f"old{i}") for i in range(12)}
    jobs = [(_add, (path, f"new{i}")) for i in range(12)] + [(_revoke, (path, u)) for u in old]
    jobs = [j for pair in zip(jobs[:12], jobs[12:]) for j in pair]  # adds and revokes interleaved
    with ProcessPoolExecutor(6, mp_context=multiprocessing.get_context("fork")) as pool:
        results = [f.result() for f in [pool.submit(fn, a) for fn, a in jobs]]
    added = dict(r for r in results if isinstance(r, tuple))
    ring = KeyRing(read_keys(path))
    assert all(ring.user_for(k) == u for u, k in added.items()) and len(added) == 12  # every printed key works
    assert not any(ring.user_for(k) for k in old.values())  # every reported revocation holds
    assert len(read_keys(path).keys) == 12 and not list(tmp_path.glob("*.tmp"))
