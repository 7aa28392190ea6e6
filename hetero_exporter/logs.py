"""Structured logging: one JSON object per line (default), or plain text for people.

Fields passed with ``extra={...}`` become keys of the JSON object. ``setup`` also routes what
Python would otherwise print raw to stderr through the same handler: uncaught exceptions (main
thread and other threads), unraisable exceptions and warnings; asyncio logs through its
``asyncio`` logger anyway. So in JSON mode every line on stderr is one JSON object.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from types import TracebackType
from typing import Any, Callable, Optional, TextIO

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _STANDARD and not k.startswith("_"):
                doc[k] = v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        return base + ("".join(f" {k}={v}" for k, v in extras.items()) if extras else "")


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (not at setup): a background
    thread that logs after its caller swapped stderr (tests, embedding) still has a stream."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def setup(fmt: str = "json", level: str = "info") -> None:
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    route_uncaught()


_uncaught = logging.getLogger("hetero_exporter.uncaught")
_chained: dict[str, Callable[..., object]] = {}  # a non-default hook found installed (a test runner's): still called


def _thread_exception(args: "threading.ExceptHookArgs") -> None:
    if not issubclass(args.exc_type, SystemExit):
        name = args.thread.name if args.thread is not None else None
        exc = args.exc_value
        _uncaught.error("uncaught exception in thread %s", name,
                        exc_info=(args.exc_type, exc, args.exc_traceback) if exc is not None else None,
                        extra={"in_thread": name})
    if "thread" in _chained:
        _chained["thread"](args)


def _main_exception(exc_type: type[BaseException], exc_value: BaseException, tb: Optional[TracebackType]) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc_value, tb)
        return
    _uncaught.critical("uncaught exception", exc_info=(exc_type, exc_value, tb))
    if "main" in _chained:
        _chained["main"](exc_type, exc_value, tb)


def _unraisable(args: "sys.UnraisableHookArgs") -> None:
    exc = args.exc_value
    _uncaught.warning("unraisable exception: %s", args.err_msg or "exception ignored",
                      exc_info=(args.exc_type, exc, args.exc_traceback) if exc is not None else None,
                      extra={"object": repr(args.object)[:200]})
    if "unraisable" in _chained:
        _chained["unraisable"](args)


def route_uncaught() -> None:
    """Uncaught and unraisable exceptions and warnings go through logging, not raw to stderr."""
    for key, current, default, ours in (
            ("thread", threading.excepthook, threading.__excepthook__, _thread_exception),
            ("main", sys.excepthook, sys.__excepthook__, _main_exception),
            ("unraisable", sys.unraisablehook, sys.__unraisablehook__, _unraisable)):
        if current is not ours and current is not default:
            _chained[key] = current
    threading.excepthook = _thread_exception
    sys.excepthook = _main_exception
    sys.unraisablehook = _unraisable
    logging.captureWarnings(True)
