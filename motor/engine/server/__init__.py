"""`python -m motor.engine.server`: runs an engine as a child process and serves its status.

    python -m motor.engine.server --engine-host H --engine-port P --status-host H --status-port S -- ENGINE...

The engine (vLLM's OpenAI server, or motor's simulator) starts in its own process group with the gated runtime
patches on its PYTHONPATH (`motor patch status`). `GET /status` on the status port answers
`{"status": "initial" | "normal" | "abnormal"}` from the engine's `/health`. SIGTERM stops the engine's whole
process group; the server exits when the engine exits, with the engine's exit code.
"""
