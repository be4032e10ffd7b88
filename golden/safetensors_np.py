"""Minimal, deterministic safetensors writer and reader (NumPy + ml_dtypes).

File layout:
  8 bytes   little-endian u64 N = header length in bytes
  N bytes   JSON header, keys sorted, compact separators, padded with spaces
            to a multiple of 8 bytes
  data      tensors laid out contiguously in the order of their sorted names,
            each little-endian, C order; "data_offsets" are relative to the
            start of the data section

The writer is deterministic: the same tensors always give the same bytes.
"""

import json
import struct
import sys

import ml_dtypes
import numpy as np

_DTYPES = {
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

if sys.byteorder != "little":  # pragma: no cover - the project targets little-endian hosts
    raise RuntimeError("safetensors_np requires a little-endian host")


def dtype_name(arr):
    """safetensors dtype string of a NumPy array."""
    dt = np.dtype(arr.dtype)
    for name, ref in _DTYPES.items():
        if dt == ref:
            return name
    raise TypeError("unsupported dtype for safetensors: %s" % dt)


def serialize(tensors, metadata=None):
    """Return the bytes of a safetensors file holding `tensors` (name -> ndarray).

    `metadata`, when given, is a dict of str -> str stored as "__metadata__".
    """
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("tensor name __metadata__ is reserved")
        arr = np.ascontiguousarray(tensors[name])
        dname = dtype_name(arr)
        raw = arr.astype(_DTYPES[dname], copy=False).tobytes(order="C")
        header[name] = {
            "dtype": dname,
            "shape": [int(s) for s in arr.shape],
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks)


def write(path, tensors, metadata=None):
    data = serialize(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def parse(data):
    """Parse safetensors bytes. Returns (tensors dict, metadata dict or None).

    Validates the header strictly: sizes, offsets, contiguity and coverage.
    """
    if len(data) < 8:
        raise ValueError("file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("header length %d exceeds file size" % n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    tensors = {}
    spans = []
    for name, info in header.items():
        dname = info["dtype"]
        if dname not in _DTYPES:
            raise ValueError("tensor %s: unsupported dtype %s" % (name, dname))
        dt = _DTYPES[dname]
        shape = tuple(int(s) for s in info["shape"])
        b, e = (int(v) for v in info["data_offsets"])
        count = 1
        for s in shape:
            count *= s
        if not (0 <= b <= e <= len(body)) or e - b != count * dt.itemsize:
            raise ValueError("tensor %s: bad data_offsets %r" % (name, [b, e]))
        tensors[name] = np.frombuffer(body[b:e], dtype=dt).reshape(shape).copy()
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError("data section has a gap or overlap at byte %d" % b)
        pos = e
    if pos != len(body):
        raise ValueError("data section has %d trailing bytes" % (len(body) - pos))
    return tensors, metadata


def read(path):
    with open(path, "rb") as f:
        return parse(f.read())


def tensor_nbytes(arr):
    return int(np.asarray(arr).nbytes)
