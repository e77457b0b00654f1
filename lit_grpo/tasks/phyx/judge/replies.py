"""Reading a judge server's reply body within a size limit, compressed or not.

A body is read as it arrives (``httpx``'s raw stream), decoded here rather than by ``httpx`` so that decompression
is bounded too: ``zlib`` is asked for at most what is left of the limit at each step. A gzip reply of 2 MB that
inflates to 2 GB is refused after ``limit`` bytes, holding no more than that (httpx would inflate each network
chunk whole, and brotli or zstd, when their packages are installed, without a bound): requests accept only
:data:`ACCEPT_ENCODING`, and any other encoding is a failed call.
"""

from __future__ import annotations

import zlib


class ReplyError(ValueError):
    """A reply body that cannot be read within the limits (too large, an unknown or corrupt encoding)."""


ACCEPT_ENCODING = "gzip, deflate"
"""What requests accept: the encodings :class:`BoundedBody` decodes in bounded steps."""


class BoundedBody:
    """A reply body read chunk by chunk (as sent), decoded (``Content-Encoding`` gzip or deflate; ``identity``), and
    refused as soon as it, or what it inflates to, exceeds ``limit`` bytes: never more than ``limit`` + one
    network chunk is held.

    Raises (from :meth:`feed` / :meth:`finish`):
        ReplyError: too large, an encoding other than gzip / deflate / identity, or corrupt compressed data.
    """

    def __init__(self, encoding: str | None, limit: int):
        self.limit, self.parts, self.size = limit, [], 0
        codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip() and c.strip() != "identity"]
        unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
        if unknown:
            raise ReplyError(f"reply in Content-Encoding {unknown[0]!r}, which was not asked for ({ACCEPT_ENCODING})")
        # decoders in the order they undo the encodings (the last one applied first)
        self.decoders = [zlib.decompressobj(16 + zlib.MAX_WBITS if c != "deflate" else zlib.MAX_WBITS)
                         for c in reversed(codings)]

    def _inflate(self, data: bytes, k: int) -> bytes:
        """``data`` through decoders ``k...``; each decoder's output bounded by what is left of the limit."""
        if k == len(self.decoders) or not data:
            return data
        d, out = self.decoders[k], []
        try:
            while data:
                out.append(d.decompress(data, self.limit - self.size + 1))
                data = d.unconsumed_tail
                if sum(map(len, out)) > self.limit - self.size:
                    break
        except zlib.error as exc:
            raise ReplyError(f"reply body is not valid compressed data ({exc})") from None
        return self._inflate(b"".join(out), k + 1)

    def feed(self, chunk: bytes) -> None:
        part = self._inflate(chunk, 0)
        self.size += len(part)
        if self.size > self.limit:
            raise ReplyError(f"reply over judge.max_reply_bytes={self.limit} bytes (after decompression)")
        self.parts.append(part)

    def finish(self) -> bytes:
        return b"".join(self.parts)
