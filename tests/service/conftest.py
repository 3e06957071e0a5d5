"""A real recall service (`dkilab serve` in its own process) on a free loopback port, over a store holding
the fixture users and the 40 recall-agent scenario users, with one API key per user."""
import pytest
from dkilab.service.server import free_port, spawn


class Service:
    def __init__(self, url: str, keys: dict[str, str], store, sessions: dict[str, str], proc):
        self.url, self.keys, self.store, self.sessions, self.proc = url, keys, store, sessions, proc

    def client(self, user: str):
        from dkilab.service import Client

        return Client(self.url, self.keys[user])


@pytest.fixture(scope="session")
def service(embedder, tmp_path_factory):
    from dkilab.eval.data import load_dataset
    from dkilab.eval.harness.stores import store_for
    from dkilab.memory import MemoryManager
    from dkilab.service.keys import add_key

    root = tmp_path_factory.mktemp("service")
    convs = load_dataset("fixtures") + load_dataset("agent_recall")
    store = store_for(convs, "service", embedder, path=root / "store")
    manager = MemoryManager(store)  # history endpoints: live sessions of two users
    sessions = {}
    for user, text in (("u_maya", "押品怎么创建？"), ("u_tom", "How do I open an account?")):
        me = manager.for_user(user)
        sid = me.get_or_create_session()
        me.save_user_query(sid, content=text)
        me.save_assistant_answer(sid, content="answer to " + text)
        sessions[user] = sid
    keys = {c.user_id: add_key(root / "keys.yaml", c.user_id) for c in convs}
    port = free_port()
    proc = spawn(root / "store", root / "keys.yaml", port)
    service = Service(f"http://127.0.0.1:{port}", keys, store, sessions, proc)
    service.keys_path = root / "keys.yaml"
    yield service
    proc.terminate()
    proc.wait(timeout=15)
    store.close()
