"""What the planner tells `motor status` and the dashboard: `GET /planner/status` on its API port."""

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DecisionView(Message):
    at: float = Field(description="epoch seconds")
    kind: str = Field(description="hold, scale or convert")
    targets: dict[str, int]
    reason: str


class PlannerStatus(Message):
    counts: dict[str, int] = Field(description="instances the job runs, per role")
    active: dict[str, int] = Field(description="of those, routable at the controller")
    targets: dict[str, int] = Field(description="the counts the last decision wants")
    need: dict[str, float] | None = Field(
        default=None, description="instances each role needs (fractional), as last worked out"
    )
    figures: dict[str, float | None] = Field(default_factory=dict, description="what the last decision read")
    notes: list[str] = Field(default_factory=list, description="how the capacities were measured")
    applying: str | None = Field(default=None, description="the change being carried out")
    interrupted: str | None = Field(
        default=None, description="a change the planner was carrying out when it last stopped"
    )
    decisions: list[DecisionView] = Field(default_factory=list, description="the latest first")
