"""mqgather: durable fan-in aggregator for IBM MQ."""

__version__ = "0.1.0"
