/* KUPL shared-memory API (kupl_shm_*, KUPL_*), implemented by shmtopo's
 * libshmtopo.so. Build: cc prog.c $(python -m shmtopo --cflags --libs) */
#ifndef SHMTOPO_KUPL_H
#define SHMTOPO_KUPL_H

#define SHMTOPO_COMPAT_NAME(x) kupl_##x
#define SHMTOPO_COMPAT_CONST(x) KUPL_##x
#include "shmtopo_shm_compat.h"
#undef SHMTOPO_COMPAT_NAME
#undef SHMTOPO_COMPAT_CONST

#endif /* SHMTOPO_KUPL_H */
