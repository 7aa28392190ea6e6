"""The errors that end a command (``hetero_exporter.errors``, the floor module every input checker
shares), under the model's name that most modules import."""

from hetero_exporter.errors import EXIT_FAIL, EXIT_OK, EXIT_USAGE, ExitError, InputError, UsageError

__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "ExitError", "InputError", "UsageError"]
