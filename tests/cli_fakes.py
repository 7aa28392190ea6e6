"""Helpers for the CLI-collector tests (npu-smi, cnmon): an in-process stand-in for
vendor_cli.run over a fake tool's answer(), and process-liveness checks."""

from __future__ import annotations

import time
from typing import Any, Callable

from hetero_exporter.sdk.runner import CliError, CliResult


def in_process_runner(answer: Callable[[Any, float, list], tuple[int, str, str]], scenario: Any, clock: Any,
                      calls: list) -> Callable[..., CliResult]:
    """vendor_cli.run's signature over ``answer(scenario, t, args)`` without a process (fast);
    records each call's arguments in ``calls``; a non-zero status raises CliError."""
    def run(argv, timeout, env=None, **_):
        calls.append(list(argv[1:]))
        status, out, err = answer(scenario, clock.t(), list(argv[1:]))
        if status:
            raise CliError(f"{argv[0]}: exit status {status}: {err or out}")
        return CliResult(tuple(argv), out, err, status, 0.0)
    return run


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int, limit: float = 30.0) -> bool:
    """Whether ``pid`` is gone (or a zombie) within ``limit`` seconds: a killed process takes a
    moment to be torn down on a loaded machine, so it is waited for, not checked at once."""
    end = time.monotonic() + limit
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    return not alive(pid)


def mutated(texts: list[str], chars: str, alphabet: str):
    """Hypothesis strategy: one of ``texts`` (real captures) with 1-4 line or character edits
    (a line dropped, doubled, cut, swapped, a character replaced from ``chars``, a line of
    ``alphabet`` inserted)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw) -> str:
        lines = draw(st.sampled_from(texts)).splitlines()
        for _ in range(draw(st.integers(1, 4))):
            if not lines:
                break
            i = draw(st.integers(0, len(lines) - 1))
            op = draw(st.sampled_from(["drop", "dup", "cut", "char", "swap", "insert"]))
            if op == "drop":
                del lines[i]
            elif op == "dup":
                lines.insert(i, lines[i])
            elif op == "cut":
                lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
            elif op == "char" and lines[i]:
                j = draw(st.integers(0, len(lines[i]) - 1))
                lines[i] = lines[i][:j] + draw(st.sampled_from(list(chars))) + lines[i][j + 1:]
            elif op == "swap" and len(lines) > 1:
                k = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[k] = lines[k], lines[i]
            else:
                lines.insert(i, draw(st.text(alphabet, max_size=80)))
        return "\n".join(lines) + "\n"

    return strategy()


def only_parse_errors(tool: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None when it raised a ParseError naming ``tool`` with a message; any
    other exception fails the calling (fuzz) test."""
    from hetero_exporter.sdk.contract import ParseError
    try:
        return fn(*args)
    except ParseError as e:
        assert str(e).startswith(tool) and len(str(e)) > len(tool) + 2, e
        return None
