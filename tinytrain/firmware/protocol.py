"""The serial protocol between the host (``tinytrain stream``) and a real board's firmware
(firmware/c/tt_harness_serial.c).

Stop-and-wait: the host sends one request frame, the board answers with one reply frame. All integers are
little-endian; the CRC is CRC-32 (IEEE 802.3, as zlib.crc32) of every byte after the magic and before the CRC.

Request (host -> board)::

    offset   size  field
    0        2     magic b"Tt"
    2        1     command: b"I" info, b"T" train on the sample, b"P" predict the sample, b"S" send the state,
                   b"L" load the state of the payload
    3        4     length L of the payload, uint32 (TT_INPUT_BYTES for T and P, the state's bytes for L, 0 for I
                   and S)
    7        2     label, int16 (the class for T and P; an autoencoder's T: 0, unread; -1 for I, S, L and an
                   unlabelled P)
    9        L     payload: T and P the image (int8 NHWC, the model's input form); L a state in the
                   tt_state_load format (codegen/state.py)
    9 + L    4     CRC-32 of bytes 2 .. 9 + L - 1

Reply (board -> host)::

    0        2     magic b"tT"
    2        1     the request's command, or b"E" for an error (payload: an ASCII message)
    3        4     length N of the payload, uint32
    7        N     payload
    7 + N    4     CRC-32 of bytes 2 .. 7 + N - 1

The magics mix cases and every command is an upper-case letter, so a magic can never be read into a
command byte: after stray bytes, the receiver resynchronizes on the first magic followed by a command.

Payloads: I  ASCII "key=value" pairs separated by spaces (board, protocol, input, output, training, state);
T  float32 loss + uint64 ticks (CPU cycles of the step); P  int16 class + uint64 ticks + the int8 logits;
S  the tt_state_save() bytes (codegen/state.py); L  empty.
A board running the field runtime (codegen/templates/field_serial.c.j2; info has field=1) takes a latent (the cut
model's input) as the payload: T  tt_learn, reply int16 result + uint64 ticks; P  tt_observe, reply int16 class +
uint64 ticks + the int8 logits; R  tt_field_predict (statistics untouched), reply int16 class; D  tt_drift, reply
int32 active + uint32 since; Q  tt_field_status, reply 8 int32; S  the tt_field_save bytes. It has no L. A request with a bad CRC or length is answered with E
and changes nothing; the board then resynchronizes on the next magic. L is streamed into tt_state_load_from
(no copy of the state in the board's RAM): a state of another model or plan (magic, version or fingerprint) is
refused with E and changes nothing; a CRC mismatch, found once the whole state is in, answers E and puts the
model back to tt_init()'s state (the host sends it again).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from tinytrain.errors import TinyTrainError

REQUEST_MAGIC = b"Tt"
REPLY_MAGIC = b"tT"
PROTOCOL_VERSION = 1
COMMANDS = (b"I", b"T", b"P", b"S", b"L", b"R", b"D", b"Q")  # R, D, Q: the field runtime's firmware
REPLY_COMMANDS = COMMANDS + (b"E",)
_REQ_HEAD = struct.Struct("<2scIh")
_REPLY_HEAD = struct.Struct("<2scI")
MAX_REPLY = 1 << 22


class ProtocolError(TinyTrainError):
    """A malformed frame, a CRC mismatch, a timeout, or an error reply from the board."""


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def request(command: bytes, image: bytes = b"", label: int = -1) -> bytes:
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    body = _REQ_HEAD.pack(REQUEST_MAGIC, command, len(image), label)[2:] + image
    return REQUEST_MAGIC + body + struct.pack("<I", crc32(body))


def reply(command: bytes, payload: bytes) -> bytes:
    body = _REPLY_HEAD.pack(REPLY_MAGIC, command, len(payload))[2:] + payload
    return REPLY_MAGIC + body + struct.pack("<I", crc32(body))


@dataclass(frozen=True)
class Reply:
    command: bytes
    payload: bytes


def read_reply(read) -> Reply:
    """One reply frame from ``read(n) -> bytes`` (fewer bytes means a timeout); skips bytes before the magic."""
    window, command = b"", b""
    while not command:
        b = read(1)
        if not b:
            raise ProtocolError("timeout waiting for a reply from the board")
        if window == REPLY_MAGIC and b in REPLY_COMMANDS:
            command = b
        else:
            window = (window + b)[-2:]
    head = command + _read_exact(read, 4)
    n = struct.unpack("<I", head[1:])[0]
    if n > MAX_REPLY:
        raise ProtocolError(f"reply length {n} is not plausible")
    payload = _read_exact(read, n)
    (crc,) = struct.unpack("<I", _read_exact(read, 4))
    if crc != crc32(head + payload):
        raise ProtocolError("reply CRC mismatch")
    if command == b"E":
        raise ProtocolError(f"the board answered: {payload.decode('ascii', 'replace')}")
    return Reply(command, payload)


def _read_exact(read, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = read(n - len(data))
        if not chunk:
            raise ProtocolError(f"timeout in the middle of a reply ({len(data)} of {n} bytes)")
        data += chunk
    return data


def info_text(pairs: dict) -> str:
    """``pairs`` as an info payload's ``key=value`` items (floats in full: repr), parse_info's inverse."""
    return " ".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in pairs.items())


def parse_info(payload: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in payload.decode("ascii").split() if "=" in item)


class Board:
    """A board running the serial harness, over any object with ``write(bytes)`` and ``read(n)`` (pyserial).

    A board that has just started (QEMU's netduinoplus2 starts when the host connects; opening a port may reset
    a board) drops the bytes that arrive before its UART is on: the first info request is repeated every
    ``hello_wait`` seconds (ports with a ``timeout`` attribute), ``hello_attempts`` times, and the replies to
    repeats that arrive late are drained before anything else is sent."""

    def __init__(self, port, hello_attempts: int = 5, hello_wait: float = 2.0) -> None:
        self.port = port
        self.info = parse_info(self._hello(hello_attempts, hello_wait).payload)
        if int(self.info.get("protocol", -1)) != PROTOCOL_VERSION:
            raise ProtocolError(f"the board speaks protocol {self.info.get('protocol')}, this host {PROTOCOL_VERSION}")
        self.input_bytes = int(self.info["input"])
        self.output_bytes = int(self.info["output"])
        self.training = self.info.get("training") == "1"

    def _hello(self, attempts: int, wait: float) -> Reply:
        timeout = getattr(self.port, "timeout", None)
        if timeout is None:
            return self._call(b"I")
        self.port.timeout = min(wait, timeout)
        try:
            for attempt in range(attempts):
                try:
                    r = self._call(b"I")
                    break
                except ProtocolError as e:  # nothing, or an error reply to a frame that lost its first bytes
                    if attempt == attempts - 1 or not str(e).startswith(("timeout", "the board answered")):
                        raise
            while attempt and self.port.read(4096):  # late replies to the repeats
                pass
            return r
        finally:
            self.port.timeout = timeout

    def _call(self, command: bytes, image: bytes = b"", label: int = -1) -> Reply:
        self.port.write(request(command, image, label))
        r = read_reply(self.port.read)
        if r.command != command:
            raise ProtocolError(f"asked {command!r}, the board answered {r.command!r}")
        return r

    def _image(self, x) -> bytes:
        data = bytes(memoryview(x).cast("B")) if not isinstance(x, bytes) else x
        if len(data) != self.input_bytes:
            raise ValueError(f"an image has {len(data)} bytes; the board's model takes {self.input_bytes}")
        return data

    def train(self, x, label: int) -> tuple[float, int]:
        """(loss before the update, CPU cycles of the step)."""
        if not self.training:
            raise ProtocolError("this firmware was built without the training API (compile with --plan)")
        loss, ticks = struct.unpack("<fQ", self._call(b"T", self._image(x), label).payload)
        return loss, ticks

    def predict(self, x, label: int = -1) -> tuple[int, int, bytes]:
        """(class, CPU cycles, int8 logits)."""
        p = self._call(b"P", self._image(x), label).payload
        cls, ticks = struct.unpack_from("<hQ", p)
        return cls, ticks, p[10:]

    def state(self) -> bytes:
        return self._call(b"S").payload

    def learn(self, x, label: int) -> int:
        """The field runtime's tt_learn: TT_FIELD_LEARNED, HELD or BAD_LABEL."""
        return struct.unpack_from("<h", self._call(b"T", self._image(x), label).payload)[0]

    def observe(self, x) -> tuple[int, bytes]:
        """The field runtime's tt_observe: (class, int8 logits)."""
        p = self._call(b"P", self._image(x)).payload
        return struct.unpack_from("<h", p)[0], p[10:]

    def field_predict(self, x) -> int:
        return struct.unpack("<h", self._call(b"R", self._image(x)).payload)[0]

    def drift(self) -> tuple[int, int]:
        """tt_drift: (1 while an alarm lasts, the sample count it was raised at)."""
        active, since = struct.unpack("<iI", self._call(b"D").payload)
        return active, since

    def field_status(self) -> tuple[int, ...]:
        """tt_field_status: labelled, learned, steps, rollbacks, checks, alarms, active, since."""
        return struct.unpack("<8i", self._call(b"Q").payload)

    def load_state(self, data: bytes) -> None:
        """Load a state (the tt_state_load bytes, e.g. a fleet's global state) into the board's model; a state of
        another size is refused here, one of another model or plan by the board (ProtocolError, one line)."""
        if not self.training:
            raise ProtocolError("this firmware was built without the training API (compile with --plan)")
        size = int(self.info.get("state", -1))
        if len(data) != size:
            raise ProtocolError(f"a state of {len(data)} bytes; the board's model has a state of {size} bytes")
        self._call(b"L", bytes(data))
