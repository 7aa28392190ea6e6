"""The bridge's state file under the agent's state dir: open episodes and unsent events.

Read back as hostile (the state dir is a host path): a regular file of this user that no one
else may write, not a link, at most ``MAX_STATE_BYTES`` (``smallfile.read_regular``), JSON whose
every field ``episodes.parse_doc`` checks. Written atomically (a temporary file in the same
folder, fsync, rename), mode 0600; ``remove_stale`` at start removes the temporary files of a
save that a SIGKILL cut short.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from hetero_exporter import smallfile

STATE_FILE = "nvsentinel.json"
MAX_STATE_BYTES = 16 << 20  # episodes are ~1 KiB each; MAX_OPEN of them and a full outbox fit
TMP_PREFIX = ".nvsentinel-"  # its temporary files (smallfile.write_atomically)


def path_in(state_dir: Optional[str]) -> Optional[str]:
    return os.path.join(state_dir, STATE_FILE) if state_dir else None


def load(path: str) -> Optional[Any]:
    """The JSON document at ``path``; None when there is none. ValueError (a bad file: not
    regular, a link, too big, not ours, not JSON) or OSError otherwise."""
    try:
        data = smallfile.read_regular(path, MAX_STATE_BYTES, follow_links=False, check=smallfile.owned_by_this_agent)
    except FileNotFoundError:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"not JSON: {e}") from None


def save(path: str, doc: Any) -> None:
    """``doc`` as JSON at ``path`` through a temporary file and a rename; OSError as raised."""
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
    smallfile.write_atomically(path, data, prefix=TMP_PREFIX)


def remove_stale(path: str) -> int:
    """Remove the temporary files an interrupted ``save`` left beside ``path``; how many."""
    return smallfile.remove_stale(os.path.dirname(path) or ".", TMP_PREFIX)
