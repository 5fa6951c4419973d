"""Rates, read the same by every tool (simulate's bandwidths, the emulated
cluster's and the training driver's link caps), durations, and byte counts
written for people.

Bits are ``b``/``bit`` (``100Gbit``, ``100Gbps``, ``100Gb/s``; tc's own
``1gbit``, ``500mbit``, ``10kbit``), bytes ``B`` (``12.5GB``, ``12.5GB/s``,
``12.5GBps``); prefixes are decimal. The unit is required, and a lower-case
``gbps``/``mbps``/``kbps`` is refused: tc reads it as bytes, network
vendors as bits. (Sizes in bytes have their own parser, 1024-based:
``pyscalecomm._C.parse_size``.)
"""

from __future__ import annotations

import argparse
import re

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TC = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kmgt]?)bit\s*")  # tc's bits: 1gbit
_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]?)(bit|b|B)(ps|/s)?\s*")


def parse_rate(text: str) -> float:
    """Bytes per second of a rate with its unit (see the module's doc);
    argparse.ArgumentTypeError (a ValueError) when it is not one."""
    m = _TC.fullmatch(text)
    if m:
        return float(m.group(1)) * _PREFIX[m.group(2).upper() if m.group(2) else ""] / 8
    m = _RATE.fullmatch(text)
    if m:
        value = float(m.group(1)) * _PREFIX[m.group(2)]
        return value / 8 if m.group(3) in ("b", "bit") else value
    hint = ""
    if re.fullmatch(r"\s*[0-9.]+\s*[kmgt]bps\s*", text):
        hint = (
            " (lower-case 'bps' is bytes to tc and bits to vendors: "
            "write Gbit or Gbps for bits, GB/s for bytes)"
        )
    raise argparse.ArgumentTypeError(
        f"not a rate: {text!r}{hint}; give a unit: "
        "bits as b/bit (100Gbit, 100Gbps, 1gbit), bytes as B (12.5GB/s)"
    )


def parse_seconds(text: str) -> float:
    """Seconds as 15, 15s or 500ms, more than 0; argparse.ArgumentTypeError
    (a ValueError) otherwise."""
    t = text.strip().lower()
    scale = 1e-3 if t.endswith("ms") else 1.0
    try:
        value = float(t[:-2] if t.endswith("ms") else t.rstrip("s")) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, e.g. 15, 15s or 500ms") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
    return value


def rate_text(text: str) -> str:
    """An argparse type: checks a rate and keeps its text (for display)."""
    parse_rate(text)
    return text


def tc_rate(bytes_per_s: float) -> str:
    """The rate in tc's unambiguous spelling: whole bits per second."""
    return f"{round(bytes_per_s * 8)}bit"


def format_bytes(n: int) -> str:
    """A byte count as people read it: 512 B, 256 KiB, 8 MiB, 1.5 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"
