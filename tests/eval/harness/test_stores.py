"""Cached dataset stores belong to their data: the same messages reuse the store, a message edited under
the same id gets a new one (never the stale text)."""
import copy
import dataclasses


def test_the_cached_store_is_keyed_by_message_content_not_ids_alone(embedder, tmp_path, monkeypatch):
    from dkilab.eval.data import load_dataset
    from dkilab.eval.harness.stores import store_for

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    convs = load_dataset("fixtures", limit=1)
    first = store_for(convs, "fx", embedder)
    path, n = first.path, first.count()
    first.close()
    again = store_for(copy.deepcopy(convs), "fx", embedder)
    assert again.path == path and again.count() == n  # a hit: nothing ingested twice
    again.close()

    edited = copy.deepcopy(convs)
    m = edited[0].messages[0]
    edited[0].messages[0] = dataclasses.replace(m, content=m.content + " (edited)")
    fresh = store_for(edited, "fx", embedder)
    assert fresh.path != path and fresh.for_user(m.user_id).get(m.message_id).content.endswith("(edited)")
    fresh.close()
    moved = copy.deepcopy(convs)
    moved[0].messages[1] = dataclasses.replace(moved[0].messages[1], metadata={"domain": "system"})
    other = store_for(moved, "fx", embedder)
    assert other.path not in (path, fresh.path)  # metadata is stored (routing filters on it): part of the key
    other.close()
