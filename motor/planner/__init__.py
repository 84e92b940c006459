"""The SLO planner: sizes the prefill and decode sides to the traffic they get, within the config's bounds and
budget, through the scale paths `motor deploy --update-instance-num` uses. Run it with
`python -m motor.planner --spec FILE` (docs/planner.md)."""
