"""All MQ I/O: the transport interface, its two implementations, and the inbound bridge."""
