# shmtopo._fastpath (native/cpython/fastpath.c): the entry of collectives on
# plain arrays (each returns None, or NotImplemented, without doing anything
# when the arguments are not its plain case; `windows` is the comm's list of
# its Windows, where a large array may lie) and the fences of windows.

from typing import Any, Callable

def bind(ndarray: type, empty_like: Callable[..., Any], ops: dict[str, int], window_min: int,
         dtypes: tuple[Any, ...], last_error: Callable[[int], BaseException],
         value_error: Callable[[str, int], BaseException]) -> None: ...
def allreduce(handle: int, windows: list[Any], array: Any, out: Any, op: Any) -> Any: ...
def reduce(handle: int, windows: list[Any], array: Any, out: Any, op: Any, root: Any, is_root: bool) -> Any: ...
def bcast(handle: int, windows: list[Any], array: Any, root: Any) -> Any: ...
def allgather(handle: int, windows: list[Any], array: Any, out: Any, nranks: int) -> Any: ...

class NativeWindow:
    """The native half of shmtopo.Window: its fences."""
    _fast: int  # the native window's address, 0 once freed
    def fence(self) -> None:
        """Collective: every store any rank made before the fence is visible to
        every rank after it. A wait that lasts releases the GIL."""
    def peer_fence(self, rank: int) -> None:
        """Two-sided: this rank and ``rank`` both call it naming each other;
        each one's earlier stores are then visible to the other."""
