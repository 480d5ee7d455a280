"""PNG snapshots of the matrix without pygame (headless machines, tests): zlib and struct are enough."""

import struct
import zlib


def _chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode(width, height, rgb):
    """RGB bytes (row-major, 3 per pixel) -> PNG file bytes."""
    if len(rgb) != width * height * 3:
        raise ValueError("need %d RGB bytes for %dx%d, got %d" % (width * height * 3, width, height, len(rgb)))
    stride = width * 3
    raw = bytearray()
    for y in range(height):
        raw.append(0)  # filter type None
        raw += rgb[y * stride : (y + 1) * stride]
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(bytes(raw), 6))
        + _chunk(b"IEND", b"")
    )


def decode(data):
    """PNG bytes written by encode() (8-bit RGB, filter 0) -> (width, height, rgb). For tests and round trips."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos = 8
    width = height = None
    idat = b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype != 2:
                raise ValueError("only 8-bit RGB PNGs are supported")
        elif kind == b"IDAT":
            idat += body
    if width is None or height is None:
        raise ValueError("no IHDR chunk")
    raw = zlib.decompress(idat)
    stride = width * 3
    out = bytearray()
    for y in range(height):
        row = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        if row[0] != 0:
            raise ValueError("only filter type 0 is supported")
        out += row[1:]
    return width, height, bytes(out)


def matrix_image(width, height, rgb, scale=16, gap=3, background=(12, 12, 14)):
    """Scale a matrix frame up to square LEDs with dark gaps, the way the window shows it. Returns (w, h, rgb)."""
    out_w = width * scale
    out_h = height * scale
    bg = bytes(background)
    out = bytearray(bg * (out_w * out_h))
    inner = scale - gap
    for y in range(height):
        for x in range(width):
            i = (y * width + x) * 3
            px = bytes(rgb[i : i + 3])
            run = px * inner
            for dy in range(inner):
                o = ((y * scale + dy) * out_w + x * scale) * 3
                out[o : o + inner * 3] = run
    return out_w, out_h, bytes(out)
