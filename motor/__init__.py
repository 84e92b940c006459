"""motor: control plane and request router for PD-disaggregated LLM serving with a KV-cache pool."""

__version__ = "0.1.0"
