"""Typed HTTP messages shared by the runtime components, one module per protocol."""
