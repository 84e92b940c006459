"""How the coordinator runs: as one process (single.py), or as a main process serving management that
supervises inference worker processes sharing the API port (worker_supervisor.py, worker.py)."""
