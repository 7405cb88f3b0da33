"""The node's hwloc topology, read-only, shared by all ranks."""
from __future__ import annotations

from typing import Any

from . import topology as _topology
from .objects import (
    CACHE_TYPES, IO_TYPES, OSDEV_TYPES, TYPES, BridgeAttr, CacheAttr, PciAttr, TopoObject, hwloc_version,
    type_name, type_number,
)
from .topology import (
    ATTEMPTS, DISTANCE_KINDS, MEMATTR_FLAGS, MEMBIND_POLICIES, PLACEMENT_POLICIES, SOURCES, CpuKind, Distances,
    MemAttr, MemAttrValue, Topology, held_topology, placement_policy_number, share_topology, split_color,
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
        return _topology._shared
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
