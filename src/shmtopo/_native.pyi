# The cffi binding of the native core (built by build_ffi.py). Its C
# declarations are the CDEF blocks of native/*.h, which mypy cannot read:
# `lib` stays untyped; `ffi` is typed where its result type is fixed.
from typing import Any

class _FFI:
    NULL: Any
    errno: int
    def string(self, cdata: Any, maxlen: int = ...) -> bytes: ...
    def __getattr__(self, name: str) -> Any: ...

ffi: _FFI
lib: Any
