/* Single copy: a rank copies straight out of (or into) a peer's private
 * memory with process_vm_readv / process_vm_writev (cross-memory attach,
 * CMA), instead of through the comm's scratch buffers, which copy every
 * byte twice (sender -> scratch -> receiver).
 *
 * The kernel allows it where the reader may ptrace the target: same user
 * and Yama's kernel.yama.ptrace_scope 0 (or CAP_SYS_PTRACE), and no seccomp
 * filter refusing the calls (containers often refuse them). So whether it
 * works is found out, not assumed: at comm creation every rank reads a word
 * of every peer and writes one back (shmtopo_sc_probe), and the ranks then
 * agree on the outcome (comm.c), so that every rank takes the same path.
 * XPMEM would do the same with a mapping; /dev/xpmem is only reported. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "wait.h"

#define PROBE_MAGIC 0x73686d746f706f31ull /* "shmtopo1" */
/* One call copies at most this much: the kernel caps a call near 2 GiB. */
#define CALL_MAX ((size_t)1 << 30)

/* What peers read (the magic mixed with our pid, so a reader knows it read
 * the right process) and where they write their probe. Nothing reads the
 * sink: a peer writes the same value again and again. */
static volatile uint64_t probe_word;
static volatile uint64_t probe_sink;

void shmtopo_sc_publish(uint64_t *wordp, uint64_t *sinkp)
{
    probe_word = PROBE_MAGIC ^ (uint64_t)getpid();
    *wordp = (uint64_t)(uintptr_t)&probe_word;
    *sinkp = (uint64_t)(uintptr_t)&probe_sink;
}

/* kernel.yama.ptrace_scope, or -1 without Yama. */
static int ptrace_scope(void)
{
    char buf[16] = "";
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n > 0 ? atoi(buf) : -1;
}

/* Why the kernel may have refused, for the message. */
static const char *scope_hint(int scope, char *buf, size_t len)
{
    if (scope > 0)
        snprintf(buf, len, " (kernel.yama.ptrace_scope is %d; only 0 lets ranks of one user read "
                 "each other's memory without CAP_SYS_PTRACE)", scope);
    else
        snprintf(buf, len, "%s", access("/dev/xpmem", F_OK) == 0
                 ? " (/dev/xpmem exists, but shmtopo was built without XPMEM support)" : "");
    return buf;
}

int shmtopo_sc_probe(const shmtopo_comm_t *comm, const uint64_t *words, const uint64_t *sinks)
{
    char hint[160];
    const int scope = ptrace_scope();
    if (scope >= 3) /* no process may attach to another, whatever its rights */
        return shmtopo_fail(EPERM, -1, "single copy is impossible here%s",
                            scope_hint(scope, hint, sizeof(hint)));
    for (int i = 1; i < comm->size; i++) {
        const int p = (comm->rank + i) % comm->size;
        const pid_t pid = comm->pids[p];
        uint64_t seen = 0, value = PROBE_MAGIC ^ (uint64_t)pid;
        struct iovec mine = {&seen, sizeof(seen)}, theirs = {(void *)(uintptr_t)words[p], sizeof(seen)};
        ssize_t n = process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
        const char *call = "process_vm_readv";
        if (n == (ssize_t)sizeof(seen) && seen == value) {
            mine.iov_base = &value;
            theirs.iov_base = (void *)(uintptr_t)sinks[p];
            n = process_vm_writev(pid, &mine, 1, &theirs, 1, 0);
            call = "process_vm_writev";
            if (n == (ssize_t)sizeof(value))
                continue;
        } else if (n == (ssize_t)sizeof(seen)) {
            return shmtopo_fail(EIO, shmtopo_world(comm, p),
                                "single copy probe: rank %d (pid %d) holds another value than it published",
                                shmtopo_world(comm, p), (int)pid);
        }
        const int err = n < 0 ? errno : EIO;
        return shmtopo_fail(err, shmtopo_world(comm, p), "%s of rank %d (pid %d) failed: %s%s", call,
                            shmtopo_world(comm, p), (int)pid, strerror(err),
                            scope_hint(scope, hint, sizeof(hint)));
    }
    return 0;
}

/* Why a copy between this rank and the peer failed (k: what the last call
 * returned, errno its error), recorded; -1. */
static int copy_failed(const shmtopo_comm_t *comm, int peer, int write, ssize_t k, size_t left, uint64_t remote,
                       const char *what)
{
    const pid_t pid = comm->pids[peer];
    const int err = k < 0 ? errno : EFAULT;
    const int me = shmtopo_world(comm, comm->rank), them = shmtopo_world(comm, peer);
    /* A peer that left after a failure (its own, or a death it saw) may
     * be exiting, its memory half gone: that failure is the cause, as
     * every survivor names it. */
    const int origin = comm->chan.win ? shmtopo_left_because(comm->chan.win, peer) : -1;
    if (origin >= 0) {
        shmtopo_sweep_stale_files(comm->config.topo_dir);
        return shmtopo_fail_left(comm->chan.win, origin, what, "copied memory");
    }
    if (err == ESRCH || !shmtopo_process_alive(pid, comm->starttimes[peer])) {
        /* the peer is gone: what a wait that finds it dead reports */
        shmtopo_sweep_after_death(comm->config.topo_dir);
        return shmtopo_fail(EOWNERDEAD, them, "rank %d (pid %d) exited while rank %d copied its memory in %s",
                            them, (int)pid, me, what);
    }
    /* EFAULT does not say which side: part of this rank's array or of
     * the peer's is not mapped (or not accessible) */
    return shmtopo_fail(err, them, "%s: rank %d could not %s %zu bytes %s rank %d (at %#llx there, "
                        "process_vm_%sv): %s", what, me, write ? "write" : "read", left,
                        write ? "into" : "from", them, (unsigned long long)remote,
                        write ? "write" : "read", strerror(err));
}

/* Copy n bytes between `local` and the peer's address `remote`, in as many
 * calls as the kernel needs (a call may copy less than asked: a fault part
 * way returns what was copied, and the next call the error). */
static int copy(const shmtopo_comm_t *comm, int peer, int write, char *local, uint64_t remote, size_t n,
                const char *what)
{
    const pid_t pid = comm->pids[peer];
    size_t done = 0;
    while (done < n) {
        const size_t m = n - done < CALL_MAX ? n - done : CALL_MAX;
        struct iovec mine = {local + done, m}, theirs = {(void *)(uintptr_t)(remote + done), m};
        ssize_t k = write ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                          : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        return copy_failed(comm, peer, write, k, n - done, remote + done, what);
    }
    return 0;
}

ssize_t shmtopo_sc_readv(const shmtopo_comm_t *comm, int peer, const struct iovec *local, size_t nlocal,
                         const struct iovec *remote, size_t nremote, size_t n, const char *what)
{
    ssize_t k;
    do
        k = process_vm_readv(comm->pids[peer], local, nlocal, remote, nremote, 0);
    while (k < 0 && errno == EINTR);
    return k > 0 || n == 0 ? k : copy_failed(comm, peer, 0, k, n, (uint64_t)(uintptr_t)remote[0].iov_base, what);
}

int shmtopo_sc_read(const shmtopo_comm_t *comm, int peer, void *dst, uint64_t src, size_t n, const char *what)
{
    return copy(comm, peer, 0, dst, src, n, what);
}

int shmtopo_sc_write(const shmtopo_comm_t *comm, int peer, uint64_t dst, const void *src, size_t n,
                     const char *what)
{
    return copy(comm, peer, 1, (char *)src, dst, n, what);
}

int shmtopo_sc_gone(shmtopo_comm_t *comm, int peer)
{
    const int err = errno;
    if (err != EOWNERDEAD && err != ECONNABORTED)
        return 0;
    /* A failure posted in the step would name the poster, and the step
     * could even succeed (the peer may have posted before it died): leave,
     * as a failed wait does, so peers fail naming the dead rank. */
    const int origin = comm->chan.win ? shmtopo_left_because(comm->chan.win, peer) : -1;
    comm->broken = 1;
    shmtopo_chan_leave(comm, origin >= 0 ? origin : peer); /* the rank copy() named */
    errno = err;
    return 1;
}

const char *shmtopo_single_copy_name(int mechanism)
{
    return mechanism == SHMTOPO_SC_CMA ? "cma" : "none";
}
