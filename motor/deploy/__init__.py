"""Deployment: config -> `Plan` (pure data), then a backend acts on it (local processes or Kubernetes)."""

from motor.deploy.plan import Component, Plan, Probe, build_plan, service_host

__all__ = ["Component", "Plan", "Probe", "build_plan", "service_host"]
