"""Byte sizes as operators write them: "1GB", "512MB", "1.5GiB", "268435456" or a plain int.

Mooncake reads "GB"/"MB" as binary units, so motor does too: 1GB == 1GiB == 2**30 bytes.
"""

import math
import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: object) -> int:
    """Return the number of bytes `value` names; raise ValueError with the accepted forms otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; use bytes (268435456) or a string like '1GB', '512MB'")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match.group(2).lower() in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise ValueError(
        f"{value!r} is not a size; use bytes (268435456) or a number with a unit B, KB, MB, GB, TB "
        "(binary, GiB-style suffixes accepted too), e.g. '1GB' or '1.5GiB'"
    )


def format_size(num_bytes: int) -> str:
    """Short human form, e.g. 1073741824 -> '1GiB', 1610612736 -> '1.5GiB'."""
    for suffix, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:g}{suffix}"
    return f"{num_bytes}B"
