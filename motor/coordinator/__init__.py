"""The coordinator: the OpenAI-compatible entry point that splits each request into prefill and decode legs.
Run it with `python -m motor.coordinator --spec FILE`."""
