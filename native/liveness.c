/* Is a peer process still there? Waits poll this now and then so that a
 * rank killed mid-fence makes its peers fail instead of hang. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Reads state and start time (field 22) from /proc/PID/stat. The command
 * name in parentheses may itself hold spaces and ')', so parse after the
 * last ')'. Returns 0 when the process is absent or unreadable. */
static unsigned long long read_stat(pid_t pid, char *statep)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    char state;
    unsigned long long start = 0;
    /* after ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime cutime cstime priority nice threads
     * itrealvalue starttime(22) */
    if (sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &state, &start) != 2)
        return 0;
    if (statep)
        *statep = state;
    return start;
}

unsigned long long shmtopo_process_starttime(pid_t pid)
{
    return read_stat(pid, NULL);
}

int shmtopo_process_alive(pid_t pid, unsigned long long starttime)
{
    /* /proc hidden (hidepid) or unreadable: fall back to signal 0, which
     * cannot tell a reused pid apart but never calls a live peer dead. */
    if (starttime == 0 || (kill(pid, 0) == 0 && read_stat(pid, NULL) == 0))
        return kill(pid, 0) == 0 || errno == EPERM;
    char state = '?';
    unsigned long long now = read_stat(pid, &state);
    if (now == 0 || now != starttime)
        return 0; /* gone, or the pid now belongs to another process */
    return state != 'Z' && state != 'X';
}

int shmtopo_pid_running(pid_t pid)
{
    if (kill(pid, 0) < 0 && errno != EPERM)
        return 0;
    char state = '?';
    /* a zombie is dead: only its parent has not reaped it yet */
    return read_stat(pid, &state) == 0 || (state != 'Z' && state != 'X');
}

/* Whether rank r released its side of the comm cleanly (shmtopo_comm_release):
 * its process may then exit at any time, and that is no death. */
static int departed(const shmtopo_comm_t *comm, int r)
{
    const shmtopo_win_t *chan = comm->chan.win;
    return chan && chan->ctrl[r] && atomic_load_explicit(&chan->ctrl[r]->departed, memory_order_acquire);
}

int shmtopo_comm_find_dead(const shmtopo_comm_t *comm)
{
    for (int r = 0; r < comm->size; r++)
        if (r != comm->rank && !shmtopo_process_alive(comm->pids[r], comm->starttimes[r]) && !departed(comm, r))
            return r;
    return -1;
}
