/* KUPL shared-memory API (kupl_shm_*, KUPL_*), implemented by shmtopo's
 * libshmtopo.so. Build: cc prog.c $(python -m shmtopo --cflags --libs)
 * Works from C and C++. */
#ifndef SHMTOPO_KUPL_H
#define SHMTOPO_KUPL_H

/* Macros, as in KUPL's kupl.h, so that `#if ret == KUPL_OK`-style checks and
 * the export attribute work as they do there. */
#define KUPL_OK 0
#define KUPL_ERROR (-1)
#ifndef kupl_export
#define kupl_export __attribute__((visibility("default")))
#endif

#define SHMTOPO_COMPAT_NAME(x) kupl_##x
#define SHMTOPO_COMPAT_CONST(x) KUPL_##x
#include "shmtopo_shm_compat.h"
#undef SHMTOPO_COMPAT_NAME
#undef SHMTOPO_COMPAT_CONST

#endif /* SHMTOPO_KUPL_H */
