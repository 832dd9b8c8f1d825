"""pacheck's element types in NumPy: raw storage views and exact conversions to and from float32.

pacheck hands bf16, f16 and fp8 buffers as raw unsigned integers (uint16, uint8) plus the dtype name, so no
bit is reinterpreted on the way (NumPy has no bf16 or fp8). These helpers decode them exactly (every bf16,
f16 and fp8 value is a float32 value) and encode float32 results with round-to-nearest-even, the rounding
pacheck's judge assumes for the output. Encodings: docs/FP8.md.
"""
import numpy as np

#: storage type of each pacheck dtype (what Buffer.numpy() returns)
STORAGE = {
    "f32": np.float32,
    "f16": np.uint16,
    "bf16": np.uint16,
    "fp8_e4m3fn": np.uint8,
    "fp8_e4m3fnuz": np.uint8,
    "fp8_e5m2": np.uint8,
    "i32": np.int32,
}
ITEMSIZE = {k: np.dtype(v).itemsize for k, v in STORAGE.items()}


def _fp8_table(exp_bits, bias, kind):
    """float32 value of each of the 256 codes of an fp8 encoding (docs/FP8.md's table)."""
    man_bits = 7 - exp_bits
    out = np.empty(256, np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        if kind == "fnuz" and code == 0x80:
            v = np.nan
        elif kind == "fn" and e == 15 and m == 7:
            v = np.nan
        elif kind == "ieee" and e == 31:
            v = sign * np.inf if m == 0 else np.nan
        elif e == 0:
            v = sign * (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            v = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        out[code] = v
    return out


_FP8 = {
    "fp8_e4m3fn": _fp8_table(4, 7, "fn"),
    "fp8_e4m3fnuz": _fp8_table(4, 8, "fnuz"),
    "fp8_e5m2": _fp8_table(5, 15, "ieee"),
}


def to_float32(raw, dtype):
    """The float32 values of `raw`, an array in STORAGE[dtype] (as Buffer.numpy() gives it), decoded exactly."""
    raw = np.asarray(raw)
    if dtype == "f32":
        return raw.astype(np.float32, copy=False)
    if dtype == "f16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in _FP8:
        return _FP8[dtype][raw]
    raise ValueError(f"dtype {dtype!r}: not a pacheck element type (known: {', '.join(STORAGE)})")


def from_float32(values, dtype):
    """`values` (float32) encoded in STORAGE[dtype] with round-to-nearest-even (NaN stays NaN): what a kernel
    writes into an output buffer of that dtype. Outputs are f32, f16 or bf16 (fp8 is a cache type only)."""
    v = np.asarray(values, dtype=np.float32)
    if dtype == "f32":
        return v
    if dtype == "f16":
        return v.astype(np.float16).view(np.uint16)
    if dtype == "bf16":
        u = v.view(np.uint32).astype(np.uint64)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(v), np.uint16(0x7FC0), rounded)
    raise ValueError(f"dtype {dtype!r}: outputs are f32, f16 or bf16")
