"""How one client request crosses engine legs: per-request state, the four dispatch profiles, retries."""
