"""Lifetime rules shared by collective objects (Comm, Window): freed
explicitly on every rank, or abandoned locally when a ``with`` block ends by
an exception (the other ranks may never reach their free), never by the
garbage collector, which only warns."""
from __future__ import annotations

import warnings

from ._native import ffi


class Collective:
    _h = ffi.NULL

    def free(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.free()
        else:
            # a peer's death or error that caused ours stays the one named
            self.abandon(_origin=getattr(exc, "rank", None))

    def __del__(self):
        if self._h != ffi.NULL:
            warnings.warn(f"shmtopo.{type(self).__name__} was never freed (free() is collective; "
                          "call it on every rank)", ResourceWarning, stacklevel=2)
