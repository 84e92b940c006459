"""Engine adapters: turn an engine section into a running OpenAI-compatible server (`vllm`, `sim`)."""
