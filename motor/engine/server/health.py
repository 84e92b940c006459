"""The engine's health as the status port reports it: a small state machine fed by /health probes."""

from dataclasses import dataclass, field

from motor.protocol.engine import EngineHealth


@dataclass
class HealthTracker:
    """initial → normal on the first healthy probe; normal → abnormal after `failure_threshold` failed probes
    in a row; initial → abnormal when the engine was never healthy within `startup_timeout_s`; any → abnormal,
    for good, when the engine process exited."""

    failure_threshold: int
    startup_timeout_s: float
    started_at: float
    status: EngineHealth = "initial"
    consecutive_failures: int = 0
    exited: bool = field(default=False)

    def probe_succeeded(self) -> None:
        if self.exited:
            return
        self.consecutive_failures = 0
        self.status = "normal"

    def probe_failed(self, now: float) -> None:
        if self.exited:
            return
        self.consecutive_failures += 1
        lost = self.status == "normal" and self.consecutive_failures >= self.failure_threshold
        never_came_up = self.status == "initial" and now - self.started_at > self.startup_timeout_s
        if lost or never_came_up:
            self.status = "abnormal"

    def engine_exited(self) -> None:
        self.exited = True
        self.status = "abnormal"
