"""Scheduling: which registered endpoint serves a leg (filter → score → pick, O(log n) per decision)."""
