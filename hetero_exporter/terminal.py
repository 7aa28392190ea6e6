"""Text from outside made safe to write on a user's terminal.

Model names, driver versions, pod and process names come from vendor tools, the kubelet or a
remote agent's ``/snapshot``; any of them may hold escape sequences (a pane title rewritten, a
clipboard write by OSC 52, the screen cleared) or bidirectional overrides that reorder what is
shown. ``printable`` escapes every character that is not printable (C0 and C1 controls, format
characters such as U+202E, line and paragraph separators, unassigned code points) as ``\\xNN``
/ ``\\uNNNN``, turns other spaces into a plain space and caps the length, so one string is one
line of visible text. Like ``validate``, this module imports nothing of the project.
"""

from __future__ import annotations

MAX_TEXT = 256  # characters of one string shown; longer ones end with an ellipsis


def _escaped(c: str) -> str:
    import unicodedata  # only where something is to be escaped: not on the agent's start-up path
    if unicodedata.category(c) == "Zs":  # a non-breaking or ideographic space: shown as a space
        return " "
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` with every non-printable character escaped, at most ``limit`` characters of it kept."""
    if len(text) > limit:
        text = text[:limit] + "…"
    if text.isprintable():  # the common case: nothing to do, in C
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)
