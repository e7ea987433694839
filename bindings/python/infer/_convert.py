"""Checked conversions of Python values to the C types of infer.h.

ctypes converts silently: 2**40 stored in a c_int32 becomes 0, -1 in a
c_size_t becomes 2**64 - 1, 1e300 in a c_float becomes inf and b"a\\0b" in a
c_char_p becomes b"a". Every value this binding passes to libinfer, as an
argument, a struct field or an array element, goes through one of these
functions first, so a value that does not fit is refused with an exception
naming the parameter (InferInvalidArgument, a ValueError, for a value out of
range; TypeError for a value of the wrong kind) and never reaches C changed.
"""
from __future__ import annotations

import ctypes
import math
import operator
from typing import Any, Iterable, Optional, Type

_FLT_MAX = 3.4028234663852886e38


def _int_range(ctype: Any) -> Optional[tuple]:
    if ctype in (ctypes.c_bool,):
        return (0, 1)
    if not (isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData)):
        return None
    code = getattr(ctype, "_type_", None)
    if not isinstance(code, str) or code not in "bBhHiIlLqQnN":
        return None
    bits = 8 * ctypes.sizeof(ctype)
    if code.islower():
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return (0, (1 << bits) - 1)


def _invalid(message: str) -> Exception:
    from . import InferInvalidArgument, Status  # the package defines the errors
    return InferInvalidArgument(Status.ERR_INVALID_ARGUMENT, message)


def to_int(ctype: Any, value: Any, name: str) -> int:
    """value as a Python int that fits ctype (bools count as 0/1)."""
    rng = _int_range(ctype)
    assert rng is not None, ctype
    if isinstance(value, float):
        raise TypeError(f"{name} must be an integer, not float ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    lo, hi = rng
    if not lo <= v <= hi:
        cname = f"{'int' if lo < 0 else 'uint'}{8 * ctypes.sizeof(ctype)}"
        raise _invalid(f"{name} = {v} does not fit the C type {cname} [{lo}, {hi}]")
    return v


def to_float(ctype: Any, value: Any, name: str) -> float:
    """value as a float that a C float/double holds without becoming infinite.
    NaN and infinities are passed on as they are (libinfer checks them)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:
        raise _invalid(f"{name} = {value} does not fit a C {ctype.__name__[2:]}") from None
    if ctype is ctypes.c_float and math.isfinite(v) and abs(v) > _FLT_MAX:
        raise _invalid(f"{name} = {v!r} does not fit the C type float (|x| <= {_FLT_MAX!r})")
    return v


def to_cstr(value: Any, name: str) -> Optional[bytes]:
    """A NUL-terminated C string: str (UTF-8) or bytes without a NUL byte."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            b = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _invalid(f"{name} is not valid UTF-8 text ({e.reason})") from None
    elif isinstance(value, (bytes, bytearray)):
        b = bytes(value)
    else:
        raise TypeError(f"{name} must be str or bytes, not {type(value).__name__}")
    nul = b.find(b"\0")
    if nul >= 0:
        raise _invalid(f"{name} contains a NUL byte at offset {nul} (a C string would end there)")
    return b


def to_c(ctype: Any, value: Any, name: str) -> Any:
    """value checked for ctype: integers, floats and char pointers; other
    types (pointers, arrays, structs) are passed as they are."""
    if _int_range(ctype) is not None:
        return to_int(ctype, value, name)
    if ctype in (ctypes.c_float, ctypes.c_double):
        return to_float(ctype, value, name)
    if ctype is ctypes.c_char_p:
        return to_cstr(value, name)
    return value


def set_field(struct: ctypes.Structure, field: str, value: Any, name: Optional[str] = None) -> None:
    """struct.field = value, checked against the field's C type."""
    for fname, ftype in type(struct)._fields_:
        if fname == field:
            setattr(struct, field, to_c(ftype, value, name or field))
            return
    raise AttributeError(f"{type(struct).__name__} has no field {field}")


def array(ctype: Type[Any], values: Iterable[Any], name: str) -> Any:
    """A ctypes array of ctype from values, each checked ("name[i]")."""
    vals = list(values)
    checked = [to_c(ctype, v, f"{name}[{i}]") for i, v in enumerate(vals)]
    return (ctype * len(checked))(*checked)


def timeout_ms(timeout: Optional[float], name: str = "timeout") -> int:
    """Seconds (None: no limit) as the int32 milliseconds of infer.h: < 0 no
    limit, 0 just look. A wait longer than int32 milliseconds (24.8 days) is
    no limit; a negative one just looks; NaN is refused."""
    if timeout is None:
        return -1
    t = to_float(ctypes.c_double, timeout, name)
    if math.isnan(t):
        raise _invalid(f"{name} is NaN")
    ms = t * 1000
    if ms >= 2**31 - 1:
        return -1
    return max(0, int(ms))
