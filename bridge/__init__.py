"""MQ I/O. ``bridge.mq`` is the MQ client layer; the modules here are the Temporal-facing
bridge: identification, the inbound loop and the fan-out side."""
