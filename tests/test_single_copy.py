"""Single copy: SHMTOPO_SINGLE_COPY is parsed strictly and must be set
alike on every rank."""
import os

import pytest

import ranks
import shmtopo


# ---- the setting is agreed --------------------------------------------------------

def _inner_comm(comm, setting):
    """A second comm over the same transport, made with this rank's setting
    (the first one, made by ranks.py, had none)."""
    if setting is None:
        os.environ.pop("SHMTOPO_SINGLE_COPY", None)
    else:
        os.environ["SHMTOPO_SINGLE_COPY"] = setting
    return shmtopo.Comm.from_callbacks(comm.size, comm.rank, allgather=comm._transport.allgather,
                                       barrier=comm._transport.barrier)


def setting_on_one_rank(comm, odd_rank, odd, others):
    try:
        inner = _inner_comm(comm, odd if comm.rank == odd_rank else others)
    except shmtopo.ShmtopoError as exc:
        return type(exc).__name__, str(exc), exc.rank
    inner.free()
    return "created", "", None


@pytest.mark.serial
@pytest.mark.parametrize("odd_rank", [0, 1, 2])
def test_setting_that_differs_fails_every_rank(odd_rank):
    out = ranks.run(3, setting_on_one_rank, odd_rank, "0", None)
    assert len(out) == 3, out
    results = {value for status, value in out.values()}
    assert len(results) == 1, out  # the same error, word for word, on every rank
    name, message, rank = results.pop()
    assert name == "ShmtopoValueError", out
    assert "SHMTOPO_SINGLE_COPY differs between ranks" in message and rank == odd_rank, message


@pytest.mark.serial
@pytest.mark.parametrize("value", ["yes", "2", "", " 1", "AUTO"])
def test_setting_is_parsed_strictly(value):
    out = ranks.run(2, setting_on_one_rank, 1, value, "auto")
    results = {value for status, value in out.values()}
    assert len(results) == 1, out
    name, message, rank = results.pop()
    if value in ("", "AUTO"):  # unset, and auto in any case, are auto
        assert name == "created", out
    else:
        assert name == "ShmtopoValueError" and rank == 1, out
        assert f"SHMTOPO_SINGLE_COPY={value}: expected auto" in message, message

