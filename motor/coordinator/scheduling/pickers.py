"""Pickers: the one candidate a decision returns."""

from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import Picker


class MaxScorePicker(Picker):
    """The highest weighted total; ties go to the endpoint picked least recently (which spreads idle load)."""

    name = "max_score"

    def pick(self, candidates: list[EndpointLoad], totals: list[float]) -> EndpointLoad:
        best = 0
        for i in range(1, len(candidates)):
            if totals[i] > totals[best] or (
                totals[i] == totals[best] and candidates[i].last_pick < candidates[best].last_pick
            ):
                best = i
        return candidates[best]


class RoundRobinPicker(Picker):
    """The first candidate at or after a cursor over the pool's positions, which then moves past it; scores
    are ignored. One picker per pool (the cursor is the pool's)."""

    name = "round_robin"

    def __init__(self) -> None:
        self.cursor = 0

    def pick(self, candidates: list[EndpointLoad], totals: list[float]) -> EndpointLoad:
        cursor = self.cursor
        chosen = next((endpoint for endpoint in candidates if endpoint.position >= cursor), candidates[0])
        self.cursor = chosen.position + 1
        return chosen
