/* KPCCL shared-memory API (kpccl_shm_*, KPCCL_*): KUPL's former name, the
 * same declarations under the old prefix, implemented by libshmtopo.so. */
#ifndef SHMTOPO_KPCCL_H
#define SHMTOPO_KPCCL_H

#define KPCCL_OK 0
#define KPCCL_ERROR (-1)
#ifndef kpccl_export
#define kpccl_export __attribute__((visibility("default")))
#endif

#define SHMTOPO_COMPAT_NAME(x) kpccl_##x
#define SHMTOPO_COMPAT_CONST(x) KPCCL_##x
#include "shmtopo_shm_compat.h"
#undef SHMTOPO_COMPAT_NAME
#undef SHMTOPO_COMPAT_CONST

#endif /* SHMTOPO_KPCCL_H */
