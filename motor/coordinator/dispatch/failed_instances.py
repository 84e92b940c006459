"""The instances of one role that already failed one request, and which of them to avoid once all of them have.

A failed instance is excluded from the request's next attempts. When every instance of the role failed it, the
request goes back to one of them, avoiding, strictest first: the ones that look gone (they refused the
connection or dropped it: a dead engine is not worth an attempt while another instance is left) and the one
that failed last; then only the gone ones; then none.
"""

_NONE: frozenset[str] = frozenset()


class FailedInstances:
    __slots__ = ("all", "gone", "last")

    def __init__(self) -> None:
        self.all: set[str] = set()
        self.gone: set[str] = set()
        self.last = ""

    def add(self, instance_id: str, gone: bool) -> None:
        self.all.add(instance_id)
        if gone:
            self.gone.add(instance_id)
        else:
            self.gone.discard(instance_id)  # it answered this time: alive after all
        self.last = instance_id

    def fallbacks(self) -> tuple[set[str] | frozenset[str], ...]:
        """What to avoid when every instance failed the request, strictest first (the last one avoids nothing)."""
        return (self.gone | {self.last}, self.gone, _NONE)
