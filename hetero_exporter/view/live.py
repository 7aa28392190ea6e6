"""The refresh loop of ``top``: redraw the latest frame every tick, act on keys, never wait on
the snapshot source (it runs on its own thread: the sampler, or the poller of ``--from``)."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from rich.console import Console
from rich.live import Live

from hetero_exporter.model import NodeSnapshot
from hetero_exporter.view import frame as frame_mod
from hetero_exporter.view import render
from hetero_exporter.view.keys import Keys

# key -> what it does to the view state (q quits; the digits sort by a column)
QUIT = ("q", "Q", "\x1b")


def apply_key(key: str, state: frame_mod.ViewState, vendors: list[str]) -> frame_mod.ViewState:
    if key == "s":
        return state.next_sort()
    if key == "v":
        return state.next_vendor(vendors)
    if key == "p":
        return state.toggle_processes()
    if key.isdigit() and 1 <= int(key) <= len(frame_mod.SORT_KEYS):
        return state.sorted_by(frame_mod.SORT_KEYS[int(key) - 1])
    return state


def once(latest: Callable[[], tuple[Optional[NodeSnapshot], str]], console: Console,
         clock: Callable[[], float] = time.time) -> None:
    snap, message = latest()
    f = frame_mod.build(snap, frame_mod.ViewState(), clock(), message)
    console.print(render.render(f, console.width))


def run(latest: Callable[[], tuple[Optional[NodeSnapshot], str]], console: Console, tick: float,
        keys: Optional[Keys] = None, clock: Callable[[], float] = time.time,
        stop: Optional[Callable[[], bool]] = None) -> None:
    """Until ``q`` (or ``stop()``): the frame of ``latest()`` redrawn every ``tick`` seconds and
    on each key. ``latest`` returns (snapshot or None, a message saying why it is old or absent)."""
    state = frame_mod.ViewState()
    keys = keys if keys is not None else Keys()

    def draw() -> Any:
        snap, message = latest()
        # no more rows than the screen has lines: a huge snapshot costs a screenful, not its size
        f = frame_mod.build(snap, state, clock(), message, max_rows=console.height)
        return f, render.render(f, console.width)

    with keys, Live(console=console, screen=console.is_terminal, auto_refresh=False,
                    redirect_stdout=False, redirect_stderr=False) as live:
        while stop is None or not stop():
            f, view = draw()
            live.update(view, refresh=True)
            key = keys.read(tick) if keys.interactive else _sleep(tick)
            if key in QUIT:
                return
            if key:
                state = apply_key(key, state, list(f.vendors))


def _sleep(seconds: float) -> Optional[str]:
    """No key pressed, ``seconds`` later (a screen without a keyboard)."""
    time.sleep(seconds)
    return None
