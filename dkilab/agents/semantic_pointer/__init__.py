"""Semantic pointers (seed semantic-pointer.md): vague parameter descriptions in an agent tree ("该用户的ID",
"that customer's account") resolved from the ancestors' memories into self-contained descriptions.

`AgentTree` (tree.py), `TreeMemory.get_ancestor_context` (memory.py), reference rules and the seed's
prompts (refs.py), `TreeContextResolver.resolve_semantic_pointers` and `SemanticPointer` (resolver.py)."""
from dkilab.agents.semantic_pointer.memory import TreeMemory
from dkilab.agents.semantic_pointer.refs import detect_references
from dkilab.agents.semantic_pointer.resolver import (
                                                     SemanticPointer,
                                                     SemanticPointerConfig,
                                                     TreeContextResolver,
                                                     compose_pointer,
                                                     inject,
)
from dkilab.agents.semantic_pointer.tree import AgentTree, TreeError, node_scope, tree_scope

__all__ = ["AgentTree", "TreeError", "TreeMemory", "TreeContextResolver", "SemanticPointer", "SemanticPointerConfig",
           "compose_pointer", "inject", "detect_references", "node_scope", "tree_scope"]
