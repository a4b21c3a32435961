"""PNG images of an exact byte size, the same bytes on every machine.

The page models need images a browser decodes and paints (first and largest contentful
paint are measured on them), in sizes the statistics give to the byte. zlib's
compressor may change its output between versions, so the pixel data is framed in
zlib *stored* blocks written here (RFC 1950/1951: no compression, the format's own
checksums); the pixels are a SHAKE-256 stream, incompressible like a photograph's
JPEG. Whatever the pixels cannot fill to the exact size is a ``tEXt`` comment chunk,
which every decoder skips.
"""

from __future__ import annotations

import hashlib
import math
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: the largest stored block (RFC 1951: LEN is 16 bits)
BLOCK = 65535
#: the bytes of a PNG around its pixel data: signature, IHDR, IEND, the IDAT chunk's
#: framing, and zlib's header and Adler-32
FRAME = 8 + 25 + 12 + 12 + 2 + 4
#: the smallest tEXt chunk: length, type, "Comment" NUL, CRC
TEXT_MIN = 4 + 4 + 8 + 4
#: the smallest PNG written here: one grey pixel, no comment
SMALLEST = FRAME + 5 + 2


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _stored(raw: bytes) -> bytes:
    """``raw`` as a zlib stream of stored blocks (no compression)."""
    out = bytearray(b"\x78\x01")  # deflate, 32 KiB window, no dictionary, check bits
    for i in range(0, max(len(raw), 1), BLOCK):
        block = raw[i : i + BLOCK]
        last = i + BLOCK >= len(raw)
        out += struct.pack("<BHH", int(last), len(block), len(block) ^ 0xFFFF) + block
    return bytes(out + struct.pack(">I", zlib.adler32(raw)))


def _blocks(n: int) -> int:
    return max(1, math.ceil(n / BLOCK))


def size_of(width: int, height: int, channels: int = 3) -> int:
    """The bytes of a width x height PNG (3 channels: RGB, 1: grey) without comment."""
    raw = height * (1 + channels * width)
    return FRAME + raw + 5 * _blocks(raw)


def fit(size: int, aspect: float = 4 / 3) -> tuple[int, int, int]:
    """``(width, height, channels)``: the largest RGB image near ``aspect`` whose PNG is
    ``size`` bytes exactly or leaves room for a comment chunk to make it so; a single
    grey row for the few sizes under 100 bytes that no RGB image fits."""
    if size < SMALLEST:
        raise ValueError(f"a PNG needs at least {SMALLEST} bytes, not {size}")
    pixels = max(1, (size - FRAME) // 3)
    width = max(1, round(math.sqrt(pixels * aspect)))
    for w in range(width, 0, -1):
        h = (size - FRAME - 5 * _blocks(size)) // (1 + 3 * w)
        while h >= 1:
            rest = size - size_of(w, h)
            if rest == 0 or rest >= TEXT_MIN:
                return w, h, 3
            h -= 1
    return size - FRAME - 5 - 1, 1, 1  # one grey row: raw = 1 + width, one block


def png(seed: bytes, size: int, aspect: float = 4 / 3) -> tuple[bytes, int, int]:
    """A valid RGB PNG of exactly ``size`` bytes with pixels drawn from ``seed``, and
    its width and height."""
    w, h, ch = fit(size, aspect)
    row = ch * w
    stream = hashlib.shake_256(b"quicbed/png/" + seed).digest(h * row)
    rows = b"".join(b"\x00" + stream[r * row : (r + 1) * row] for r in range(h))
    colour = 2 if ch == 3 else 0  # RGB or grey, 8 bits, no interlace
    ihdr = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    body = SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", _stored(rows))
    rest = size - len(body) - 12
    if rest:
        text = hashlib.shake_256(b"quicbed/png-text/" + seed).hexdigest(rest)[: rest - TEXT_MIN]
        body += _chunk(b"tEXt", b"Comment\x00" + text.encode("ascii"))
    out = body + _chunk(b"IEND", b"")
    assert len(out) == size, (len(out), size)
    return out, w, h
