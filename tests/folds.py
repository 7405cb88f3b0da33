"""What a reduction's result must be, bit for bit, given where the ranks sit.

On one node shmtopo folds in rank order: ((a0 op a1) op a2) op a3. Across
nodes each node folds its own ranks in node-rank order into one partial, and
the partials are folded in node order (nodes ordered by their leader's world
rank), so every rank gets the same bits; on one node that is the flat fold.
Integer sums of every width wrap, as in numpy and C.
"""
import numpy as np

UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def flat(op, inputs):
    """The rank-order fold of inputs (a list, one array per rank)."""
    out = np.array(inputs[0], copy=True)
    for x in inputs[1:]:
        out = UFUNCS[op](out, x).astype(out.dtype)
    return out


def node_groups(plan):
    """The world ranks of each node, nodes in the order of their leaders'
    world ranks, each node's ranks in node-rank order (a shmtopo NodePlan,
    or anything with node_of, local_of and nnodes)."""
    nodes = [sorted((w for w in range(len(plan.node_of)) if plan.node_of[w] == n),
                    key=lambda w: plan.local_of[w]) for n in range(plan.nnodes)]
    return sorted(nodes, key=lambda ranks: min(ranks))


def fold(op, inputs, plan=None):
    """The result every rank must get from a reduction of inputs (indexed by
    world rank) over the job that plan describes (None: one node)."""
    if plan is None or plan.nnodes == 1:
        return flat(op, inputs)
    return flat(op, [flat(op, [inputs[w] for w in ranks]) for ranks in node_groups(plan)])


def by_node(comm):
    """The plan of comm when it spans nodes, else None (pass to fold)."""
    return comm.plan if comm.nnodes > 1 else None
