# shmtopo._fastpath (native/cpython/fastpath.c): the entry of small
# collectives (each returns None, or NotImplemented, without doing anything
# when the arguments are not its plain case) and the fences of windows.

from typing import Any, Callable

def bind(ndarray: type, empty_like: Callable[..., Any], ops: dict[str, int], max_bytes: int,
         dtypes: tuple[Any, ...], last_error: Callable[[int], BaseException],
         value_error: Callable[[str, int], BaseException]) -> None: ...
def allreduce(handle: int, array: Any, out: Any, op: Any) -> Any: ...
def reduce(handle: int, array: Any, out: Any, op: Any, root: Any, is_root: bool) -> Any: ...
def bcast(handle: int, array: Any, root: Any) -> Any: ...
def allgather(handle: int, array: Any, out: Any, nranks: int) -> Any: ...

class NativeWindow:
    """The native half of shmtopo.Window: its fences."""
    _fast: int  # the native window's address, 0 once freed
    def fence(self) -> None:
        """Collective: every store any rank made before the fence is visible to
        every rank after it. A wait that lasts releases the GIL."""
    def peer_fence(self, rank: int) -> None:
        """Two-sided: this rank and ``rank`` both call it naming each other;
        each one's earlier stores are then visible to the other."""
