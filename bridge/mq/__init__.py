"""The MQ client layer: the transport interface, its models and typed errors, the
embedded queue manager, the IBM MQ adapter, and connecting by URL. It imports nothing
of mqgather above the configuration models."""
