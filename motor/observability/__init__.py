"""Observability built from what motor exports: the Grafana dashboard (dashboard.py, extra `observability`)."""
