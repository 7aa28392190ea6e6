"""A vendor tool's XML document (``nvidia-smi -q -x``, ``ixsmi -q -x``), read defensively.

The standard library's parser expands internal entities, so a document declaring them (a
"billion laughs") is refused before parsing; no vendor tool prints one. Every failure is a
ParseError naming the tool (and the line where the parser says).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from hetero_exporter.sdk.contract import ParseError


def document(tool: str, text: Any, root_tag: str) -> ET.Element:
    """The root element of ``text``, which must be ``<root_tag>``."""
    if not isinstance(text, str):
        raise ParseError(tool, f"expected text, got {type(text).__name__}")
    if "<!ENTITY" in text:
        raise ParseError(tool, f"entity declarations are not {tool} output")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line = e.position[0] if getattr(e, "position", None) else None
        raise ParseError(tool, f"not well-formed XML: {e}", line) from None
    except (ValueError, RecursionError) as e:
        raise ParseError(tool, f"not readable XML: {e}") from None
    if root.tag != root_tag:
        raise ParseError(tool, f"root element is <{root.tag:.40}>, expected <{root_tag}>")
    return root
