#!/usr/bin/env bash
# Stop the single-node Rightsize SLURM cluster started by start.sh.
# Stops slurmd, slurmctld, then accounting (slurmdbd, its MariaDB) using the pidfiles in
# the state dir; munged is left running (other tools may use it). Safe to run when
# nothing is running. The accounting database stays on disk for the next start.
#
# Environment: RIGHTSIZE_SLURM_DIR (default /tmp/rightsize-slurm)
set -uo pipefail

STATE_DIR="${RIGHTSIZE_SLURM_DIR:-/tmp/rightsize-slurm}"
log() { echo "[rightsize-slurm] $*" >&2; }

rc=0
for d in slurmd slurmctld slurmdbd mariadbd; do
    pf="$STATE_DIR/$d.pid"
    [[ "$d" == mariadbd ]] && pf="$STATE_DIR/mariadb.pid"
    if [[ ! -s "$pf" ]]; then
        log "$d: no pidfile ($pf); not running"
        continue
    fi
    pid="$(cat "$pf" 2>/dev/null)"
    if [[ ! "$pid" =~ ^[0-9]+$ ]] || [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$d" ]]; then
        log "$d: stale pidfile (pid '$pid' is not $d); removing"
        rm -f "$pf"
        continue
    fi
    log "stopping $d (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do   # up to 15 s
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$d (pid $pid) did not exit after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        if kill -0 "$pid" 2>/dev/null; then
            log "ERROR: could not stop $d (pid $pid)"
            rc=1
            continue
        fi
    fi
    rm -f "$pf"
done

[[ $rc -eq 0 ]] && log "stopped (munged left running)"
exit $rc
