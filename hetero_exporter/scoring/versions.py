"""Driver and runtime version comparison across vendors' numbering styles.

Vendors print versions as ``550.54.15``, ``6.7.0``, ``23.0.3`` or ``24.1.rc2``,
``v5.10.22`` (each in its own style). A version compares by its leading numeric
components (missing ones count as 0); a letter part after them (``rc``, ``beta``, ``T``)
marks a pre-release, which sorts before the release with the same numbers.
"""

from __future__ import annotations

import re
from typing import Optional

_TOKEN = re.compile(r"\d+|[A-Za-z]+")

VersionKey = tuple[tuple[int, ...], int]


def version_key(text: Optional[str]) -> Optional[VersionKey]:
    """``(numbers, 1 = release | 0 = pre-release)``; None when ``text`` holds no number."""
    if not text:
        return None
    nums: list[int] = []
    release = 1
    for tok in _TOKEN.findall(text):
        if tok.isdigit():
            nums.append(int(tok))
        elif nums:  # letters after the numbers: a pre-release tag ("rc2", "beta")
            release = 0
            break
        # letters before any number ("v5.10") are a prefix: skipped
    if not nums:
        return None
    return tuple(nums), release


def at_least(have: Optional[VersionKey], need: VersionKey) -> bool:
    """``have >= need``; an unknown ``have`` is not enough."""
    if have is None:
        return False
    width = max(len(have[0]), len(need[0]))
    a = have[0] + (0,) * (width - len(have[0]))
    b = need[0] + (0,) * (width - len(need[0]))
    return (a, have[1]) >= (b, need[1])
