"""One chaos run's figures, and the table `benchmarks/chaos.py` prints (rich)."""

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from tests.chaos.load import End, Outcome


@dataclass(frozen=True)
class RunReport:
    """What a run did to the requests sent while one fault (or several) was injected.

    - failed_explicit: requests that ended with an explicit error the fault's row allows: an SSE error event
      and `[DONE]` after tokens; for a fault of the entry point itself (a coordinator worker, the leading
      coordinator) also a connection error, the clear signal a client gets when the process it talks to dies.
    - lost_before_first_token: requests that got no token and no success although motor promises a retry for
      this fault (an error status, a connection error behind the entry point): must be 0.
    - cut: streams that ended after tokens without an error event and `[DONE]`: must be 0.
    - wrong_tokens: answers (or the part of a stream that arrived) that differ from the oracle: repeated,
      skipped or changed tokens. Must be 0.
    """

    fault: str
    rate: float
    sent: int
    succeeded: int
    failed_explicit: int
    lost_before_first_token: int
    hung: int
    wrong_tokens: int
    cut: int
    recovery_s: float | None
    keys_leaked: int | None
    slowest_s: float
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def of(
        cls,
        fault: str,
        rate: float,
        outcomes: Sequence[Outcome],
        *,
        entry_point: bool,
        recovery_s: float | None,
        keys_leaked: int | None,
        notes: Iterable[str] = (),
    ) -> "RunReport":
        ends = Counter(outcome.end for outcome in outcomes)
        explicit = ends[End.ERROR_AFTER_TOKEN]
        lost = ends[End.ERROR_BEFORE_TOKEN]
        cut = ends[End.CUT_AFTER_TOKEN]
        if entry_point:
            explicit += ends[End.CONNECTION_BEFORE_TOKEN] + ends[End.CONNECTION_AFTER_TOKEN]
        else:
            lost += ends[End.CONNECTION_BEFORE_TOKEN]
            cut += ends[End.CONNECTION_AFTER_TOKEN]
        wrong = sum(outcome.wrong_tokens for outcome in outcomes)
        return cls(
            fault=fault,
            rate=rate,
            sent=len(outcomes),
            succeeded=sum(outcome.end is End.OK and not outcome.wrong_tokens for outcome in outcomes),
            failed_explicit=explicit,
            lost_before_first_token=lost,
            hung=ends[End.HUNG],
            wrong_tokens=wrong,
            cut=cut,
            recovery_s=recovery_s,
            keys_leaked=keys_leaked,
            slowest_s=max((outcome.seconds for outcome in outcomes), default=0.0),
            notes=tuple(notes),
        )

    @property
    def violations(self) -> list[str]:
        """What no fault may cause."""
        found = []
        for name in ("lost_before_first_token", "hung", "wrong_tokens", "cut"):
            if getattr(self, name):
                found.append(f"{name}: {getattr(self, name)}")
        if self.keys_leaked:
            found.append(f"keys_leaked: {self.keys_leaked}")
        return found


def failures(outcomes: Sequence[Outcome], limit: int = 8) -> list[str]:
    """A few non-OK outcomes, for assertion messages."""
    bad = [o for o in outcomes if o.end is not End.OK or o.wrong_tokens]
    return [
        f"#{o.index} {'stream' if o.stream else 'whole'} {o.endpoint}: {o.end} after {o.seconds:.1f} s, "
        f"{o.tokens} tokens{' (WRONG)' if o.wrong_tokens else ''}: {o.detail[:300]}"
        for o in bad[:limit]
    ]


def table(reports: Sequence[RunReport], title: str) -> Table:
    grid = Table(title=title, title_justify="left")
    for column in (
        "fault",
        "sent",
        "ok",
        "failed (explicit)",
        "lost before 1st token",
        "hung",
        "wrong tokens",
        "cut w/o error",
        "recovered in",
        "keys leaked",
        "slowest",
    ):
        grid.add_column(column, justify="left" if column == "fault" else "right")
    for report in reports:
        grid.add_row(
            report.fault,
            str(report.sent),
            str(report.succeeded),
            str(report.failed_explicit),
            str(report.lost_before_first_token),
            str(report.hung),
            str(report.wrong_tokens),
            str(report.cut),
            "—" if report.recovery_s is None else f"{report.recovery_s:.1f} s",
            "—" if report.keys_leaked is None else str(report.keys_leaked),
            f"{report.slowest_s:.1f} s",
        )
    return grid


def print_table(reports: Sequence[RunReport], title: str, console: Console | None = None) -> None:
    (console or Console()).print(table(reports, title))
