#!/usr/bin/env bash
# The collective benchmark at 2, 4, 8 and 16 ranks, flat against levelled
# collectives (SHMTOPO_COLL_LEVELS), under Open MPI and MPICH, in one short
# run (about 5 minutes on a 16-core machine with the defaults; the run stops
# starting new configurations after SCALING_BUDGET seconds), writing one text
# report. Made for a machine with at least 16 cores; on fewer the ranks are
# oversubscribed and the report says so (figures then show the scheduler).
#
#   benchmarks/scaling.sh [REPORT]        (default: scaling-report.txt)
#
# Settings (environment): SCALING_RANKS ("2 4 8 16"), SCALING_MPIS ("openmpi
# mpich", each needs .venv/<mpi> from ./dev setup), SCALING_LEVELS (the
# levelled runs' SHMTOPO_COLL_LEVELS, "l3,numa,package"), SCALING_SECONDS
# (0.01 per row and repetition), SCALING_REPEATS (5, the least bench takes),
# SCALING_MAX_BYTES (4194304), SCALING_BUDGET (450 s), SCALING_SYNTHETIC (an
# HWLOC_SYNTHETIC topology for every run: to try the script on a small
# machine, where the real topology gives no levels; its figures mean nothing).
set -uo pipefail
cd "$(dirname "$0")/.."

REPORT=${1:-scaling-report.txt}
RANKS=${SCALING_RANKS:-2 4 8 16}
MPIS=${SCALING_MPIS:-openmpi mpich}
LEVELS=${SCALING_LEVELS:-l3,numa,package}
SECONDS_PER_ROW=${SCALING_SECONDS:-0.01}
REPEATS=${SCALING_REPEATS:-5}
MAX_BYTES=${SCALING_MAX_BYTES:-4194304}
BUDGET=${SCALING_BUDGET:-450}
CORES=$(nproc)
SYNTHETIC=${SCALING_SYNTHETIC:-}
[ -n "$SYNTHETIC" ] && export HWLOC_SYNTHETIC="$SYNTHETIC"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# one rank per core, so that a rank's place in the topology is its core
# (oversubscribed: unbound, as neither MPI binds two ranks to one core)
launcher() {
    local bound=1
    [ "$2" -gt "$CORES" ] && bound=0
    case $1 in
        openmpi) [ $bound = 1 ] && echo "mpiexec.openmpi --bind-to core --map-by core" || echo "mpiexec.openmpi --bind-to none" ;;
        mpich) [ $bound = 1 ] && echo "mpiexec -bind-to core" || echo "mpiexec" ;;  # the wheel's, on PATH
    esac
}

start=$(date +%s)
{
    echo "shmtopo scaling run, $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $CORES CPUs"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    [ -n "$SYNTHETIC" ] && echo "SYNTHETIC TOPOLOGY (HWLOC_SYNTHETIC=$SYNTHETIC): a trial of the script; figures mean nothing"
    echo "ranks: $RANKS; MPIs: $MPIS; levelled runs: SHMTOPO_COLL_LEVELS=$LEVELS; flat runs: =flat"
    echo "bench --collectives --seconds $SECONDS_PER_ROW --repeats $REPEATS --max-bytes $MAX_BYTES"
    echo "levelled paths: allreduce, reduce and bcast of private arrays from 64 KiB per rank (the rows"
    echo "'allreduce', 'reduce', 'bcast'); in-window, persistent and allgather rows stay flat in both runs"
} > "$REPORT"

for mpi in $MPIS; do
    if [ ! -x ".venv/$mpi/bin/python" ]; then
        echo "== $mpi: no .venv/$mpi (run ./dev setup): skipped" | tee -a "$REPORT"
        continue
    fi
    for n in $RANKS; do
        for levels in flat "$LEVELS"; do
            elapsed=$(( $(date +%s) - start ))
            if [ "$elapsed" -ge "$BUDGET" ]; then
                echo "== $mpi, $n ranks, SHMTOPO_COLL_LEVELS=$levels: skipped (budget of ${BUDGET}s spent)" | tee -a "$REPORT"
                continue
            fi
            over=""
            [ "$n" -gt "$CORES" ] && over=" (oversubscribed: $n ranks on $CORES CPUs)"
            echo "== $mpi, $n ranks, SHMTOPO_COLL_LEVELS=$levels$over, started at +${elapsed}s" | tee -a "$REPORT"
            run="env PATH=$PWD/.venv/$mpi/bin:$PATH SHMTOPO_COLL_LEVELS=$levels $(launcher "$mpi" "$n") -n $n"
            # the levels each run works with, as info prints them
            $run python -m shmtopo info 2>&1 | grep -E '^(levels|node) ' >> "$REPORT"
            $run python -m shmtopo bench --collectives --seconds "$SECONDS_PER_ROW" \
                --repeats "$REPEATS" --max-bytes "$MAX_BYTES" >> "$REPORT" 2>&1 \
                || echo "   (failed with status $?)" >> "$REPORT"
        done
    done
done
echo "== done in $(( $(date +%s) - start ))s" | tee -a "$REPORT"
