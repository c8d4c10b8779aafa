"""The host's reading of a persistent-state flash region (format: firmware/c/tt_persist.h), e.g. the QEMU boards'
tt_flash.bin: the newest valid slot's payload (``tt_state_save`` bytes) and position, found exactly as the device
finds it."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = b"TTP1"
HEADER_BYTES = 32


@dataclass(frozen=True)
class Saved:
    sequence: int
    position: int   # samples consumed when the state was saved
    state: bytes    # tt_state_save() bytes


def _slot(data: bytes, state_bytes: int) -> Saved | None:
    if len(data) < HEADER_BYTES + state_bytes or data[:4] != MAGIC:
        return None
    sequence, length, position, crc, header_crc = struct.unpack_from("<IIIII", data, 4)
    payload = data[HEADER_BYTES : HEADER_BYTES + state_bytes]
    if length != state_bytes or header_crc != zlib.crc32(data[:20]) or crc != zlib.crc32(payload):
        return None
    return Saved(sequence, position, bytes(payload))


def newest(flash: bytes, state_bytes: int) -> Saved | None:
    """The newest valid state of a region (slot A at 0, slot B at the middle), or None."""
    half = len(flash) // 2
    slots = [s for s in (_slot(flash[:half], state_bytes), _slot(flash[half:], state_bytes)) if s is not None]
    if len(slots) == 2:  # the larger sequence number modulo 2^32, as tt_persist.c's (int32_t)(b - a) > 0
        a, b = slots
        return b if 0 < (b.sequence - a.sequence) % (1 << 32) < 1 << 31 else a
    return slots[0] if slots else None
