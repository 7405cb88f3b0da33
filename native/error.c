/* Error reporting: every failing call returns -1 with errno set and leaves a
 * human-readable message in a thread-local buffer (shmtopo_last_error). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shmtopo.h"
#include "internal.h"

static _Thread_local char last_message[512];
static _Thread_local int last_rank = -1;

int shmtopo_fail(int err, int rank, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof(last_message), fmt, ap);
    va_end(ap);
    last_rank = rank;
    errno = err;
    return -1;
}

int shmtopo_fail_errno(const char *what)
{
    int err = errno;
    return shmtopo_fail(err, -1, "%s: %s", what, strerror(err));
}

const char *shmtopo_last_error(void)
{
    return last_message;
}

int shmtopo_last_error_rank(void)
{
    return last_rank;
}
