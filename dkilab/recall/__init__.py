"""Recall v4 (seed recall-v4-suffix-assembly) and the reference resolver (seed reference-resolver)."""
from dkilab.recall.config import RecallConfig, load_recall_config, validate_recall_config
from dkilab.recall.fact_loop import FactLoopResult, run_fact_loop
from dkilab.recall.fact_retriever import FactRetriever
from dkilab.recall.formatters import (
                                     DeepSeekFormatter,
                                     GenericFormatter,
                                     GLMFormatter,
                                     PromptFormatter,
                                     create_formatter,
)
from dkilab.recall.multi_signal import MultiSignalRecall
from dkilab.recall.reference import (
                                     ReferenceResolver,
                                     ReferenceResolverConfig,
                                     ReferenceScope,
                                     ReferenceType,
                                     ResolvedReference,
                                     create_reference_resolver,
)
from dkilab.recall.suffix_builder import SuffixBuilder, fact_call_reserve

__all__ = ["RecallConfig", "load_recall_config", "validate_recall_config", "FactLoopResult", "run_fact_loop",
           "FactRetriever", "PromptFormatter", "GenericFormatter", "DeepSeekFormatter", "GLMFormatter",
           "create_formatter", "MultiSignalRecall", "ReferenceResolver", "ReferenceResolverConfig", "ReferenceScope",
           "ReferenceType", "ResolvedReference", "create_reference_resolver", "SuffixBuilder", "fact_call_reserve"]
