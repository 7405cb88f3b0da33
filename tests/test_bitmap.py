"""Unit tests of shmtopo.bitmap: hwloc's bitmap syntaxes, against hwloc's
own hwloc-calc on a big synthetic node (tests/hwloc_tools.py)."""
import pytest

import shmtopo
from shmtopo import Bitmap
from shmtopo.errors import ShmtopoValueError

from hwloc_tools import big_node, calc, needs_tools  # noqa: F401 (big_node: a fixture)

pytestmark = needs_tools


@pytest.mark.serial
def test_bitmap_syntaxes_match_hwloc_calc(big_node):
    # list syntax in, hwloc's written form out
    cases = {"0-3,8": "0-3,8", "0": "0", "5-5": "5", "31-33,64,200-511": "31-33,64,200-511",
             "1,3,5,7": "1,3,5,7", "300": "300", "8,0-3": "0-3,8", "2,3,4": "2-4"}
    for text, written in cases.items():
        b = Bitmap(text)
        # hwloc-calc --pi pu:A-B pu:C: the same PUs by physical index
        assert b.mask == calc("--pi", *(f"pu:{part}" for part in text.split(",")), input=big_node), text
        assert b.format("taskset") == calc("--taskset", b.mask, input=big_node)
        assert Bitmap.parse(b.mask) == b == Bitmap.parse(b.format("taskset"), "taskset")
        assert str(b) == written and set(b) == {i for part in text.split(",")
                                               for i in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)}
        assert Bitmap(str(b)) == b and eval(repr(b), {"Bitmap": Bitmap}) == b
    b = Bitmap([8, 0, 1, 2, 3])
    assert str(b) == "0-3,8" and b.mask == "0x0000010f" and b.first == 0 and b.weight == 5
    assert isinstance(b | {9}, Bitmap) and isinstance(b & Bitmap("1-2"), Bitmap) and isinstance(b - {0}, Bitmap)
    assert isinstance(b.union([20]), Bitmap) and b ^ {0, 99} == Bitmap("1-3,8,99")
    assert b == {0, 1, 2, 3, 8} and {0, 1} <= b and hash(b) == hash(frozenset(b))
    assert Bitmap() == set() and str(Bitmap()) == "" and Bitmap().first is None and Bitmap().mask == "0x0"
    for bad in ("0-", "x", "3-1-2", "0x", -1, [1.5], [-2], [2**31], "zz,1", None, [True]):
        with pytest.raises(ShmtopoValueError):
            Bitmap(bad)
    with pytest.raises(ShmtopoValueError):
        Bitmap("0-3").format("hex")


@pytest.mark.serial
@pytest.mark.no_mpi
@pytest.mark.parametrize("text", ["4294967296", "0,4294967295", "99999999999999999999", "2147483648", "1-2147483648"])
def test_list_indices_beyond_a_c_int_raise(text):
    """hwloc wraps them into an int ("4294967296" would be {0})."""
    with pytest.raises(shmtopo.ShmtopoValueError, match="beyond index 2147483647"):
        Bitmap(text)
