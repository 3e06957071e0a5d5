"""Memory: the message store and its user-bound query API, sessions, L1 and L2 memory (the session flow that
joins them is an agent: `dkilab.agents.session_flow`)."""
from dkilab.encoders.embedder import Embedder
from dkilab.memory.l1 import L1Memory
from dkilab.memory.l2 import L2Memory
from dkilab.memory.manager import MemoryManager
from dkilab.memory.sessions import L2_MEMORY_TTL, SESSION_TTL, SessionManager, SessionNotFoundError, SessionRecord
from dkilab.memory.store import MemoryStore
from dkilab.memory.view import MessageNotFoundError, QueryFilter, UserMemory

__all__ = ["Embedder", "MemoryStore", "UserMemory", "MessageNotFoundError", "QueryFilter", "MemoryManager",
           "SessionManager", "SessionNotFoundError", "SessionRecord", "L1Memory", "L2Memory", "SESSION_TTL",
           "L2_MEMORY_TTL"]
