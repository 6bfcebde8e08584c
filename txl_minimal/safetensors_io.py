"""The safetensors format, read and written without pickle and without the ``safetensors`` package.

The shipped models (``pretrained/*.safetensors``) and the notebooks' result weights
(``results/*/*.safetensors``) use it, so any tool that reads safetensors reads them, and loading
them runs no code. A file is

    8 bytes      N, the header's length (unsigned, little-endian)
    N bytes      the header: a JSON object {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
                 "__metadata__": {str: str}}, padded with spaces to a multiple of 8 bytes
    the rest     every tensor's bytes (little-endian, row-major), at its offsets, with no gaps

``to_bytes`` lays a file out as the ``safetensors`` package does (compact JSON, tensors by
falling dtype size, then by name), so both write the same bytes, but for the order of the
metadata's keys: sorted here, a hash map's order there (tests/test_safetensors_io.py checks a
file that package wrote). A file that breaks the
format raises ``SafetensorsError`` (a ValueError) saying what is wrong.
"""
from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import torch

from txl_minimal.utils import atomic_write

# The format's dtype names, in the order the safetensors package sorts them (last first).
DTYPES: dict[str, torch.dtype] = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
                                  "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
                                  "F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
RANK = {name: i for i, name in enumerate(DTYPES)}
METADATA = "__metadata__"
MAX_HEADER = 100 << 20  # as the safetensors package: a larger "header" is damage, not a header


class SafetensorsError(ValueError):
    """A file that is not valid safetensors (truncated, not this format, inconsistent header)."""


def file_format(path: str | Path) -> str | None:
    """What a file holds, read from its first bytes, whatever its name says: "safetensors" (an 8-byte length,
    then a JSON header that fits in the file), "torch" (torch.save's zip archive, or an older pickle), "text"
    (UTF-8 text, no NUL byte; or UTF-16's byte-order mark), or None (none of these: damaged, or empty)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    size = Path(path).stat().st_size
    if len(head) > 8 and head[8:9] == b"{" and 8 + int.from_bytes(head[:8], "little") <= size:
        return "safetensors"
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":  # a zip archive; a pickle's PROTO opcode
        return "torch"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16's byte-order marks
        return "text"
    if head and b"\0" not in head:
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(head) - 3:  # (a character cut at the 4,096th byte is still text)
                return None
        return "text"
    return None


def _check_byte_order() -> None:
    if sys.byteorder != "little":  # the format is little-endian; torch's CPUs today all are
        raise SafetensorsError("safetensors is little-endian; this machine is big-endian (not supported here)")


def to_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors file holding ``tensors`` (any device; written from the CPU) and ``metadata``."""
    _check_byte_order()
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("safetensors metadata maps str to str; encode other values first (json.dumps)")
    header: dict[str, object] = {METADATA: dict(sorted(metadata.items()))} if metadata else {}
    blobs, offset = [], 0
    for name in sorted(tensors, key=lambda n: (-RANK[_dtype_name(n, tensors[n])], n)):
        t = tensors[name].detach().cpu().contiguous()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # so that the tensors start 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def _dtype_name(name: str, t: torch.Tensor) -> str:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} is a {type(t).__name__}, not a tensor")
    if t.dtype not in NAMES:
        raise TypeError(f"{name} is {t.dtype}; safetensors here holds {', '.join(map(str, NAMES))}")
    return NAMES[t.dtype]


def save_file(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``to_bytes(tensors, metadata)`` to ``path`` atomically (a temp file, then a rename)."""
    raw = to_bytes(tensors, metadata)
    atomic_write(path, lambda f: f.write(raw))


def from_bytes(raw: bytes | bytearray) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors on the CPU, metadata) of a safetensors file's bytes; ``SafetensorsError`` if damaged."""
    _check_byte_order()
    raw = raw if isinstance(raw, bytearray) else bytearray(raw)  # torch.frombuffer wants a writable buffer
    if len(raw) < 8:
        raise SafetensorsError(f"{len(raw)} bytes, shorter than the 8-byte header length")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > MAX_HEADER or 8 + n > len(raw):
        raise SafetensorsError(f"its header length says {n:,} bytes, the file has {len(raw) - 8:,} after it "
                               "(truncated, or not safetensors)")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"its header is not JSON ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"its header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop(METADATA, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError("its __metadata__ is not a map of strings to strings")
    data = memoryview(raw)[8 + n:]
    entries = sorted(((_entry(name, e), name) for name, e in header.items()), key=lambda x: x[0][2])
    end = 0
    for (_, _, (begin, stop)), name in entries:
        if begin != end:
            raise SafetensorsError(f"tensor {name} starts at byte {begin:,} of the data, expected {end:,} "
                                   "(a gap or an overlap)")
        end = stop
    if end != len(data):
        raise SafetensorsError(f"the header describes {end:,} bytes of tensors, the file holds {len(data):,} "
                               "(truncated, or extended)")
    tensors = {}
    for (dtype, shape, (begin, stop)), name in sorted(entries, key=lambda x: x[1]):
        if begin == stop:  # no elements: frombuffer refuses an empty buffer
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:  # the copy (clone) owns aligned memory, independent of raw
            flat = torch.frombuffer(data, dtype=torch.uint8, count=stop - begin, offset=begin).clone()
            tensors[name] = flat.view(dtype).reshape(shape)
    return tensors, dict(metadata)


def _entry(name: str, e: object) -> tuple[torch.dtype, list[int], tuple[int, int]]:
    """(dtype, shape, (begin, end)) of one header entry, checked against itself."""
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(f"header entry {name!r} is not {{dtype, shape, data_offsets}}")
    dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
    if dtype not in DTYPES:
        raise SafetensorsError(f"tensor {name} has dtype {dtype!r}; this reader knows {', '.join(DTYPES)}")
    ints = lambda v: isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0  # noqa: E731
                                                 for i in v)
    if not ints(shape) or not ints(offsets) or len(offsets) != 2:
        raise SafetensorsError(f"tensor {name} has shape {shape!r} and data_offsets {offsets!r}: "
                               "expected lists of non-negative integers, two offsets")
    nbytes = math.prod(shape) * torch.empty(0, dtype=DTYPES[dtype]).element_size()
    if offsets[1] - offsets[0] != nbytes:
        raise SafetensorsError(f"tensor {name} ({dtype} {shape}) needs {nbytes:,} bytes, its offsets "
                               f"{offsets} give {offsets[1] - offsets[0]:,}")
    return DTYPES[dtype], shape, (offsets[0], offsets[1])


def load_file(path: str | Path, device: str | torch.device = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors on ``device``, metadata) of the safetensors file at ``path``."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    tensors, metadata = from_bytes(raw)
    if torch.device(device).type != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors, metadata
