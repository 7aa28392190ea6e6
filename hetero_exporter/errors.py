"""The errors that end a command, each with its exit code.

``cli.main`` turns an ``ExitError`` into one line on stderr and its ``exit_code``; any other
exception is a bug and keeps its traceback. A module raises the most specific subclass it has
(``ConfigError``, ``ScenarioError``, ``PolicyError``, ...), all of them one of these two kinds.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class ExitError(Exception):
    """A command cannot go on; str() is the one-line reason."""

    exit_code = EXIT_FAIL


class InputError(ExitError, ValueError):
    """Something the user gave cannot be used (a flag, the config, a scenario, the health policy,
    the web config, a vendor's packaged table): exit 2, the message naming the field. Still a
    ValueError, so the parsers' callers that catch ValueError keep working."""

    exit_code = EXIT_USAGE


class UsageError(InputError):
    """The command line itself is wrong: the usage line is printed before the message."""
