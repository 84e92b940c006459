"""The controller: instance registry and lifecycle, heartbeats, pushing instance sets to coordinators,
optional persistence in etcd. Run it with `python -m motor.controller --spec FILE`."""
