"""Window: one shared segment part per rank, mapped in every rank, with
fences over all ranks and peer fences between two."""
from __future__ import annotations

import errno as _errno
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from ._base import Collective, CommLike, Held, number_of_name
from ._fastpath import NativeWindow, claim, unclaim
from ._native import ffi, lib
from .bitmap import Bitmap
from .errors import FreedError, ShmtopoValueError, check, last_error


BACKENDS = ("posix", "memfd", "sysv", "xpmem")
FENCE_ALGORITHMS = ("auto", "linear", "rd", "dissemination")
#: what enum shmtopo_placed says about a rank's part
_PLACED = ("first touch", "bound", "modelled, not bound", "not supported")
#: enum shmtopo_huge_kind
_HUGE_KINDS = (None, "hugetlb", "transparent")


def _nodes(place: Any) -> Bitmap:
    """The NUMA nodes of a shmtopo_win_place_t's mask."""
    words = list(place.nodes)
    return Bitmap._trusted(w * 64 + b for w, word in enumerate(words) if word for b in range(64) if word >> b & 1)


def _placement_report(policy: str, place: Any, nodes: Bitmap) -> str:
    """One line on how a rank's part was placed: policy, nodes, how."""
    how = _PLACED[place.placed]
    if place.placed == lib.SHMTOPO_PLACED_UNSUPPORTED:
        how += f" ({_errno.errorcode.get(place.err, place.err)}), first touch"
    where = f" on NUMA node{'s' if len(nodes) > 1 else ''} {nodes}" if nodes else ""
    # the machine's own count; a modelled placement is about another machine
    one = " (1 NUMA node)" if place.allowed == 1 and place.placed != lib.SHMTOPO_PLACED_MODELLED else ""
    return f"{policy}{one}{where}: {how}"


def backend_number(name: str | None) -> int:
    """The native number of a backend name (None: the comm's default)."""
    if name is None:
        return int(lib.SHMTOPO_BACKEND_DEFAULT)
    return number_of_name(lib.shmtopo_backend_from_name, name, "backend")


def fence_number(name: str | None) -> int:
    """The native number of a fence algorithm name (None: the comm's default)."""
    if name is None:
        return int(lib.SHMTOPO_FENCE_DEFAULT)
    return number_of_name(lib.shmtopo_fence_alg_from_name, name, "fence")


def _unmapper(length: int) -> Callable[[Any], None]:
    return lambda ptr: lib.shmtopo_unmap(ptr, length)


class Window(NativeWindow, Collective):
    """A collective shared-memory window. Made by :meth:`Comm.allocate`.

    ``local`` and ``query(r)`` are numpy views straight into shared memory.
    The views stay valid (never dangling) even after :meth:`free`: each
    mapping is unmapped only when the last view of it is gone.

    Attributes: ``comm`` (the comm it was allocated on), ``rank`` and
    ``size`` (this rank and the number of ranks there), ``dtype`` and
    ``shape`` (of ``local``), ``contiguous`` and ``symmetric`` (as
    allocated), ``placement``, ``placement_report`` and ``numa_nodes``
    (where each rank's pages were put), ``huge_pages`` and ``page_size``
    (what the segments got).
    """

    comm: CommLike
    #: the element type of ``local`` and of ``query(r)`` by default
    dtype: np.dtype[Any]
    #: the shape of ``local`` (and of peers' parts of the same size)
    shape: tuple[int, ...]
    #: this rank in the window's comm
    rank: int
    #: the number of ranks of the window's comm
    size: int
    #: every rank's part lies back to back in one segment (``win.all``)
    contiguous: bool
    #: every rank's part is at the same address in every rank
    symmetric: bool
    #: "local" or "interleave", as allocated
    placement: str
    #: the huge pages the segments got: None (normal pages), "hugetlb" or
    #: "transparent" (madvise asked the kernel for them; it may still not)
    huge_pages: str | None
    #: bytes per page of the segments (hugetlb: the huge page size)
    page_size: int
    _placed: tuple[list[str], list[Bitmap]] | None
    _h: Any
    _mappings: list[tuple[int, npt.NDArray[np.uint8]]]
    _parts: list[npt.NDArray[np.uint8]]
    _on_release: Callable[[Window], None]
    _local: npt.NDArray[Any]

    def __init__(self) -> None:  # use Comm.allocate
        raise TypeError("windows are made by Comm.allocate()")

    @classmethod
    def _allocate(cls, comm: CommLike, nbytes: int, attr: Any, dtype: np.dtype[Any],
                  shape: tuple[int, ...], on_release: Callable[[Window], None]) -> Window:
        """Collective (Comm.allocate): on_release(window) runs once the
        window is freed or abandoned here, for the comm to forget it."""
        self = cls.__new__(cls)
        self._h, self._fast = ffi.NULL, 0
        self._on_release = on_release
        self.comm = comm
        self.dtype = dtype
        self.shape = shape
        base = ffi.new("void **")
        handle = ffi.new("shmtopo_win_t **")
        check(lib.shmtopo_win_alloc(comm.handle, nbytes, attr, base, handle))
        self._h = handle[0]
        self._fast = int(ffi.cast("uintptr_t", self._h))  # for _fastpath; 0 once freed
        self.rank = comm.rank
        self.size = comm.size
        self.contiguous = bool(attr.contiguous)
        self.symmetric = bool(attr.symmetric)
        policy = ffi.new("int *")
        check(lib.shmtopo_win_placement(self._h, self.rank, policy, ffi.NULL))
        self.placement = ("local", "interleave")[policy[0] - 1]
        self._placed = None  # read when first asked
        page = ffi.new("size_t *")
        self.huge_pages = _HUGE_KINDS[check(lib.shmtopo_win_huge_pages(self._h, page))]
        self.page_size = int(page[0])
        # From here on this process owns the mappings through numpy: each is
        # unmapped by the garbage collector once the window and all views are gone.
        check(lib.shmtopo_win_disown_mappings(self._h))
        self._mappings = []
        for i in range(check(lib.shmtopo_win_nmappings(self._h))):
            addr, length = ffi.new("void **"), ffi.new("size_t *")
            check(lib.shmtopo_win_mapping(self._h, i, addr, length))
            owner = ffi.gc(ffi.cast("char *", addr[0]), _unmapper(length[0]))
            start = int(ffi.cast("uintptr_t", addr[0]))
            self._mappings.append((start, np.frombuffer(ffi.buffer(owner, length[0]), np.uint8)))
        self._parts = [self._part(r) for r in range(self.size)]
        self._local = self._view(self.rank, dtype, shape)
        return self

    def _placements(self) -> tuple[list[str], list[Bitmap]]:
        if self._placed is None:
            self._check_open()
            place = ffi.new("shmtopo_win_place_t *")
            reports, nodes = [], []
            for r in range(self.size):
                check(lib.shmtopo_win_placement(self._h, r, ffi.NULL, place))
                nodes.append(_nodes(place))
                reports.append(_placement_report(self.placement, place, nodes[-1]))
            self._placed = reports, nodes
        return self._placed

    @property
    def placement_report(self) -> list[str]:
        """Per rank, how its part was placed, e.g. "local (1 NUMA node): first
        touch", "local on NUMA node 1: bound", "interleave on NUMA nodes 0-1:
        modelled, not bound"."""
        return self._placements()[0]

    @property
    def numa_nodes(self) -> list[Bitmap]:
        """Per rank, the NUMA nodes chosen for its part (empty: left to the kernel)."""
        return self._placements()[1]

    @property
    def local(self) -> npt.NDArray[Any]:
        """numpy view of this rank's own part (the window's dtype and shape)."""
        return self._local

    def _part(self, rank: int) -> npt.NDArray[np.uint8]:
        """Bytes of rank's part, as a slice of the mapping that holds it."""
        addr, size = ffi.new("void **"), ffi.new("size_t *")
        check(lib.shmtopo_win_query(self._h, rank, addr, size))
        start = int(ffi.cast("uintptr_t", addr[0]))
        for base, mapping in self._mappings:
            if base <= start and start + size[0] <= base + mapping.size:
                return mapping[start - base:start - base + size[0]]
        raise AssertionError("window part outside its mappings")

    def _view(self, rank: int, dtype: np.dtype[Any], shape: tuple[int, ...] | None) -> npt.NDArray[Any]:
        part = self._parts[rank]
        if shape is not None and part.size == int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            return part.view(dtype).reshape(shape)
        if part.size % dtype.itemsize:
            raise ShmtopoValueError(
                f"rank {rank}'s part ({part.size} bytes) is not a whole number of {dtype}")
        return part.view(dtype)

    # -- access -----------------------------------------------------------
    def query(self, rank: int, dtype: npt.DTypeLike | None = None) -> npt.NDArray[Any]:
        """numpy view of ``rank``'s part (this window's dtype, and its shape
        when that rank's part has the same size as this one's)."""
        self._check_open()
        r = int(rank)
        if not 0 <= r < self.size:
            raise ShmtopoValueError(f"rank {rank} out of range [0, {self.size})", 22, r)
        dt = self.dtype if dtype is None else np.dtype(dtype)
        return self._view(r, dt, self.shape if dt == self.dtype else None)

    @property
    def all(self) -> npt.NDArray[Any]:
        """Contiguous windows only: one array over every rank's part, shaped
        (size, *shape) when all parts are equal, else flat."""
        self._check_open()
        if not self.contiguous:
            raise ShmtopoValueError("win.all needs a window allocated with contiguous=True")
        first = self._parts[0]
        mapping = next(m for b, m in self._mappings)
        offset = first.__array_interface__["data"][0] - mapping.__array_interface__["data"][0]
        total = sum(p.size for p in self._parts)
        flat = mapping[offset:offset + total]
        if all(p.size == first.size for p in self._parts):
            return flat.view(self.dtype).reshape((self.size,) + tuple(self.shape))
        return flat.view(self.dtype)

    # -- synchronisation ----------------------------------------------------
    # fence() and peer_fence(rank) are NativeWindow's: one C call each.

    def fence_loop(self, count: int) -> None:
        """Fence ``count`` times inside the native core (for benchmarks)."""
        with Held(0, self._fast):
            check(lib.shmtopo_win_fence_loop(self._h, int(count)))

    def peer_fence_loop(self, rank: int, count: int) -> None:
        with Held(0, self._fast):
            check(lib.shmtopo_win_peer_fence_loop(self._h, int(rank), int(count)))

    # -- properties -----------------------------------------------------
    @property
    def fence_algorithm(self) -> str:
        """The algorithm in use ("linear", "rd", "dissemination")."""
        name: bytes = ffi.string(lib.shmtopo_fence_alg_name(check(lib.shmtopo_win_fence_alg(self._h))))
        return name.decode()

    @property
    def backend(self) -> str:
        """The shared-memory backend of the segments ("posix", "memfd", ...)."""
        name: bytes = ffi.string(lib.shmtopo_backend_name(check(lib.shmtopo_win_backend(self._h))))
        return name.decode()

    def set_timeout(self, seconds: float) -> None:
        """Seconds any wait on this window may last (0: forever)."""
        check(lib.shmtopo_win_set_timeout(self._h, float(seconds)))

    @property
    def nbytes(self) -> int:
        """Bytes of this rank's part."""
        return int(self._parts[self.rank].size)

    @property
    def freed(self) -> bool:
        """True once the window has been freed or abandoned."""
        return bool(self._h == ffi.NULL)

    @property
    def handle(self) -> Any:
        """The native window (cffi pointer) for the core's C API; NULL once freed."""
        return self._h

    @property
    def address(self) -> int:
        """The native window as a number, to hold it (_base.Held); 0 once freed."""
        return self._fast

    def _check_open(self) -> None:
        if self._h == ffi.NULL:
            raise FreedError("the window has been freed", 9)

    # -- lifetime -------------------------------------------------------
    def free(self) -> None:
        """Collective: every rank agrees to free the window, then it is
        released. Views already taken stay readable until dropped. Freeing
        twice is a no-op; if a rank calls something else meanwhile, every
        rank raises and the window stays."""
        if self._h == ffi.NULL:
            return
        comm, win = self.comm.address, self._fast
        claim(comm, win)  # not while another thread fences on it
        handle = self._h
        self._h, self._fast = ffi.NULL, 0  # no other thread reaches it while it goes
        if lib.shmtopo_win_free(handle) < 0:
            exc = last_error()
            if not lib.shmtopo_comm_broken(self.comm.handle):
                self._h, self._fast = handle, win
                unclaim(comm, win)
                raise exc  # a rank called something else: the window stays
            self._forget()  # a wait failed: freed here anyway
            unclaim(comm, 0)
            raise exc
        self._forget()
        unclaim(comm, 0)

    def abandon(self, _origin: int | None = None) -> None:
        """Local: leave the window after an error on this rank, without
        waiting for the others; their waits on it then raise PeerAbortedError
        instead of hanging. No-op on a freed window."""
        origin = _origin if isinstance(_origin, int) else -1
        self._drop(lambda handle: lib.shmtopo_win_abandon_because(handle, origin))

    def release(self) -> None:
        """Local: drop this rank's side of the window without waiting for
        the others (a clean departure, not an error: peers still finishing
        an earlier fence are not disturbed; a peer that waits for this rank
        later raises PeerAbortedError saying it freed the window). No-op on a
        freed window."""
        self._drop(lib.shmtopo_win_release)

    def _drop(self, native: Callable[[Any], int]) -> None:
        """Leave the window on this rank alone, through `native` (the
        core's abandon or release of the handle)."""
        if self._h == ffi.NULL:
            return
        comm = self.comm.address
        claim(comm, self._fast)
        handle = self._h
        self._forget()
        try:
            check(native(handle))
        finally:
            unclaim(comm, 0)  # the window's claim went with it

    def _forget(self) -> None:
        self._h, self._fast = ffi.NULL, 0
        self._on_release(self)

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"rank {self.rank} of {self.size}"
        return f"<shmtopo.Window {self.nbytes} B, {state}>"
