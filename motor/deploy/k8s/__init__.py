"""Kubernetes backend: manifests from a Plan, apply/scale/update/delete through the official client."""
