"""The node manager: registers its instance with the controller, runs and watches the engine, heartbeats.
Run it with `python -m motor.node_manager --spec FILE`."""
