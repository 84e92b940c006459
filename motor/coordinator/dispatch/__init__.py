"""How one client request crosses engine legs: the request across its attempts (dispatch.py), each attempt as
a state machine (states.py, attempt.py), the failure table and the retries it allows (failures.py), the four
dispatch profiles as flows (flows.py), the engine legs' bodies (shaping.py), the relay to the client
(relay.py) and the metrics the transitions feed (observe.py)."""
