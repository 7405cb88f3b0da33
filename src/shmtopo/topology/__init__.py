"""The node's hwloc topology, read-only, shared by all ranks.

objects.py: the object types and TopoObject; topology.py: the Topology
class (queries, binding); sharing.py: share_topology, one copy per node.
"""
from __future__ import annotations

from typing import Any

from . import sharing as _sharing
from .objects import (
    CACHE_TYPES, IO_TYPES, OSDEV_TYPES, TYPES, BridgeAttr, CacheAttr, PciAttr, TopoObject, hwloc_version,
    type_name, type_number,
)
from .sharing import ATTEMPTS, SOURCES, held_topology, share_topology
from .topology import (
    DISTANCE_KINDS, MEMATTR_FLAGS, MEMBIND_POLICIES, PLACEMENT_POLICIES, CpuKind, Distances, MemAttr,
    MemAttrValue, Topology, placement_policy_number, split_color,
)
from .topology import _destroy_all  # noqa: F401  (a test hook)

__all__ = [
    "ATTEMPTS", "CACHE_TYPES", "DISTANCE_KINDS", "IO_TYPES", "MEMATTR_FLAGS", "MEMBIND_POLICIES", "OSDEV_TYPES",
    "PLACEMENT_POLICIES", "SOURCES", "TYPES", "BridgeAttr", "CacheAttr", "CpuKind", "Distances", "MemAttr",
    "MemAttrValue", "PciAttr", "TopoObject", "Topology", "held_topology", "hwloc_version",
    "placement_policy_number", "share_topology", "split_color", "type_name", "type_number",
]


def __getattr__(name: str) -> Any:
    # _shared (tests read it) is rebound as topologies are shared and closed:
    # read it where it lives, not a copy taken at import
    if name == "_shared":
        return _sharing._shared
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
