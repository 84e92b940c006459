"""Scheduling: which registered endpoint serves a leg — filters → weighted scorers → one picker per role
(profiles.py), compiled to the indexed heap where that gives the same answer (O(log n) per decision)."""
