"""Reading a saved vendor output (``hetero-exporter parse TOOL FILE``) with bounded memory and time.

A capture is a regular file, or standard input (``-``). Anything else is refused before a byte
is read: a character or block device (``/dev/zero`` never ends), a FIFO or socket (it may never
be written to), a directory. The file is opened non-blocking, so even a FIFO put in the file's
place after the check cannot hang the open. At most ``limit`` bytes are read (the vendor tools
print kilobytes; the collectors' runner stops a tool at 8 MiB); one byte more is an error.

Decoding goes by byte-order mark: UTF-8 (``utf-8-sig``), UTF-16 LE/BE (Windows PowerShell's
``>`` writes UTF-16 LE with a BOM), UTF-32 LE/BE (``FF FE 00 00`` is UTF-32's: no text starts
with NUL); without one, UTF-8. Undecodable bytes become
U+FFFD (the parsers then say which field they could not read). Line ends are normalized to
``\\n`` (CRLF from Windows, a lone CR).

Every refusal is a ``CaptureError`` whose message is one line naming the file.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from typing import BinaryIO, Optional, Union

DEFAULT_MAX_BYTES = 64 << 20  # 64 MiB: 8x the runner's cap on a live tool's output
_CHUNK = 1 << 20

# longest first: the UTF-32 LE mark begins with the UTF-16 LE one
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_KINDS = (
    (stat.S_ISCHR, "a device (a character device)"),
    (stat.S_ISBLK, "a device (a block device)"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class CaptureError(ValueError):
    """A capture that cannot be read as one: the message is one line naming the file."""


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def decode(data: bytes) -> str:
    """Bytes of a capture -> text (by BOM, else UTF-8; errors replaced; line ends ``\\n``)."""
    encoding, skip = "utf-8", 0
    for bom, name in _BOMS:
        if data.startswith(bom):
            encoding, skip = name, len(bom)
            break
    text = codecs.decode(memoryview(data)[skip:], encoding, "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def read_bounded(stream: BinaryIO, limit: int, name: str) -> bytes:
    """At most ``limit`` bytes of ``stream``; CaptureError when it holds more."""
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = stream.read(min(_CHUNK, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > limit:
        raise CaptureError(f"{name}: more than {limit} bytes, over the capture limit "
                           f"({_size(limit)}{LIMIT_HINT})")
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


SAVE_HINT = "save the tool's output to a file first (TOOL ... > FILE), or pipe it to '-'"
LIMIT_HINT = "; raise it with --max-bytes"


def open_capture(name: str, limit: int, hint: str = SAVE_HINT, limit_hint: str = LIMIT_HINT) -> BinaryIO:
    """A regular file opened for reading, refused (CaptureError, one line) when it is anything
    else (ending with ``hint``) or over ``limit`` bytes by its size (``limit_hint`` says how to
    raise it); the caller closes it. Opened non-blocking, so a FIFO swapped in after a check
    cannot hang the open."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags)
    except OSError as e:
        raise CaptureError(f"{name}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CaptureError(f"{name} is {_kind(st.st_mode)}, not a capture; {hint}")
        if st.st_size > limit:  # /proc files say 0: the callers' bounded reads still hold them
            raise CaptureError(f"{name}: {st.st_size} bytes, over the capture limit ({_size(limit)}{limit_hint})")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capture(source: Union[str, "os.PathLike[str]"], limit: int = DEFAULT_MAX_BYTES, *,
                 stdin: Optional[BinaryIO] = None) -> str:
    """The text of a capture: ``source`` a path, or ``-`` for ``stdin`` (default
    ``sys.stdin.buffer``). Raises CaptureError (one line) for a device, FIFO, socket or
    directory, a file over ``limit`` bytes, or an OSError while reading."""
    if limit < 0:
        raise CaptureError(f"capture limit must be >= 0 bytes, got {limit}")
    name = os.fspath(source)
    if name == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            return decode(read_bounded(stream, limit, "standard input"))
        except OSError as e:
            raise CaptureError(f"standard input: cannot read: {e.strerror or e}") from None
    try:
        with open_capture(name, limit) as f:
            data = read_bounded(f, limit, name)
    except OSError as e:
        raise CaptureError(f"{name}: cannot read: {e.strerror or e}") from None
    return decode(data)
