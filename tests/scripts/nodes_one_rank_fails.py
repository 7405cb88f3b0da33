"""Run by pytest on every rank across nodes (tests/test_realnodes.py): the
last rank fails an assertion while the others wait for it in a barrier;
conftest must abort the whole job rather than leave them waiting."""


def test_last_rank_fails(comm):
    if comm.world_rank == comm.world_size - 1:
        assert comm.world_rank < 0, "the deliberate failure of the last rank"
    comm.barrier()
