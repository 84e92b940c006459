"""An image's width and height from the first bytes of a `data:` URL, without decoding the image.

Only the start of the base64 payload is decoded: `HEAD_BYTES` hold the PNG, GIF and WebP headers and most JPEG
frame headers; a JPEG whose SOFn marker comes later (large EXIF or ICC segments) gets one more look at
`JPEG_SCAN_BYTES`. Anything else — not base64, not one of these formats, truncated, malformed — has no size
(None), and the caller scores it as an image of unknown size.
"""

import binascii
import re

HEAD_BYTES = 512
JPEG_SCAN_BYTES = 64 * 1024
DATA_URL_HEADER_CHARS = 256  # "data:<media type>[;params];base64," is far shorter

Size = tuple[int, int]  # (width, height)

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG_SOI = b"\xff\xd8"
# SOF0-SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# markers that stand alone, without a length: TEM, RST0-7, SOI, EOI
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8), 0xD8, 0xD9})
_JPEG_SOS = 0xDA
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]")
_URL_SAFE = bytes.maketrans(b"-_", b"+/")


def data_url_size(url: str) -> Size | None:
    comma = url.find(",", 0, DATA_URL_HEADER_CHARS)
    if not url.startswith("data:") or comma < 0 or not url[5:comma].endswith(";base64"):
        return None
    payload_start = comma + 1
    head = _decode_prefix(url, payload_start, HEAD_BYTES)
    if head is None:
        return None
    size = image_size(head)
    if size is None and head.startswith(_JPEG_SOI) and len(head) == HEAD_BYTES:
        scan = _decode_prefix(url, payload_start, JPEG_SCAN_BYTES)
        size = None if scan is None else image_size(scan)
    return size


def _decode_prefix(url: str, start: int, nbytes: int) -> bytes | None:
    """The first `nbytes` (or fewer, when the payload is shorter) bytes the base64 payload decodes to."""
    chars = -(-nbytes // 3) * 4
    try:
        piece = url[start : start + chars].encode("ascii")
    except UnicodeEncodeError:
        return None
    # line breaks and url-safe letters are tolerated the way lenient decoders (browsers, PIL's users) do
    piece = _NOT_BASE64.sub(b"", piece.translate(_URL_SAFE))
    piece = piece[: len(piece) - len(piece) % 4]
    try:
        return binascii.a2b_base64(piece)[:nbytes]
    except binascii.Error:
        return None


def image_size(data: bytes) -> Size | None:
    """The size an image's header states, from its first bytes (None: unknown format, truncated or malformed)."""
    if data.startswith(_PNG):
        size = _png_size(data)
    elif data.startswith(_JPEG_SOI):
        size = _jpeg_size(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        size = _gif_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
    else:
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _png_size(data: bytes) -> Size | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _gif_size(data: bytes) -> Size | None:
    if len(data) < 10:
        return None
    return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")


def _webp_size(data: bytes) -> Size | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        # a key frame: 3-byte frame tag, start code 9d 01 2a, then 14-bit width and height (2 scale bits each)
        if len(data) < 30 or data[23:26] != b"\x9d\x01\x2a":
            return None
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L":
        if len(data) < 25 or data[20] != 0x2F:
            return None
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        if len(data) < 30:
            return None
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg_size(data: bytes) -> Size | None:
    at = 2
    end = len(data)
    while at + 4 <= end:
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _JPEG_STANDALONE:
            at += 2
            continue
        if marker == _JPEG_SOS:
            return None  # the scan started before any frame header: malformed
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            if at + 9 > end:
                return None
            return int.from_bytes(data[at + 7 : at + 9], "big"), int.from_bytes(data[at + 5 : at + 7], "big")
        at += 2 + length
    return None
