"""motor-sim: a GPU-free engine SIMULATOR with vLLM's OpenAI HTTP surface. It is a test tool, not inference.

It tokenizes deterministically, writes and reads real KV bytes through the Mooncake pool, follows the
kv_transfer_params contract of every dispatch profile (docs/kv_transfer_params.md), models latency
(overhead, per-token prefill, batch-dependent inter-token latency) and injects faults. Output tokens are a
function of the KV bytes the engine holds, the sampling seed and the position, so the same prompt gives
the same tokens on every path, and corrupted or foreign KV gives different ones.

Run it with `python -m motor.engine.sim --help`.
"""
