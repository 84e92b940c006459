"""Gated runtime patches for the engines motor starts: each known fix says whether it applies here, and why.

`motor patch status` lists them. The engine server puts `_shim/` first on the engine's PYTHONPATH; its
`sitecustomize` calls `motor.engine.patches.runtime.install()`, which applies the fixes that apply, each at
the moment its target module is imported (nothing is imported early).
"""
