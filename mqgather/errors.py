"""Base exception types shared by every mqgather package."""


class MQGatherError(Exception):
    """Base of every error mqgather raises on purpose; its message is shown to the user as is."""


class ConfigError(MQGatherError):
    """A setting is missing or invalid; the message names the setting (key) at fault."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")
