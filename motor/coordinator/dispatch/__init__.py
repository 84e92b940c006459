"""How one client request crosses engine legs: the request (request.py), its attempts as a state machine
(states.py, attempt.py), the failure table (failures.py), the four dispatch profiles (profiles.py), retries
(retry.py) and the metrics the transitions feed (observe.py)."""
