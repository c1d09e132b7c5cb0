"""The error of an invalid flag value or combination (TF-free, as the checks are)."""


class ConfigError(ValueError):
    """An invalid flag value or combination; names the flag and the fix."""

    def __init__(self, flag, message):
        self.flag = flag
        super().__init__(f"--{flag}: {message}")

    @classmethod
    def from_rule(cls, flag, error):
        """The error of a `simclr_tf.rules` check on the value of `--flag`."""
        message = str(error)
        if message.startswith(f"{flag} "):
            message = message[len(flag) + 1:]
        return cls(flag, message)
