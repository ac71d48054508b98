#!/usr/bin/env bash
# Start a real single-node SLURM cluster (slurmctld + slurmd on this host) for
# Rightsize development and tests.
#
# Idempotent: if the cluster in the state dir is already up, it does nothing.
# Last line of stdout is always `export SLURM_CONF=...` so callers can:
#     eval "$(scripts/slurm/start.sh | tail -n 1)"
#
# Accounting as centers run it: slurmdbd on a private MariaDB (datadir in the state dir,
# 127.0.0.1 only), so `sacct` answers; the jobcomp file is written too.
#
# Environment:
#   RIGHTSIZE_SLURM_DIR   state dir (default /tmp/rightsize-slurm)
#   RIGHTSIZE_SLURM_WAIT  seconds to wait for the node to become idle (default 30)
#   RIGHTSIZE_SLURMCTLD_PORT / RIGHTSIZE_SLURMD_PORT  (default 6817 / 6818)
#   RIGHTSIZE_SLURMDBD_PORT / RIGHTSIZE_SLURM_DB_PORT (default 6819 / 3306)
#   RIGHTSIZE_SLURM_ACCOUNTING  1 (default): slurmdbd + MariaDB; 0: jobcomp file only
set -euo pipefail

STATE_DIR="${RIGHTSIZE_SLURM_DIR:-/tmp/rightsize-slurm}"
WAIT_S="${RIGHTSIZE_SLURM_WAIT:-30}"
CTLD_PORT="${RIGHTSIZE_SLURMCTLD_PORT:-6817}"
SLURMD_PORT="${RIGHTSIZE_SLURMD_PORT:-6818}"
DBD_PORT="${RIGHTSIZE_SLURMDBD_PORT:-6819}"
DB_PORT="${RIGHTSIZE_SLURM_DB_PORT:-3306}"
ACCOUNTING="${RIGHTSIZE_SLURM_ACCOUNTING:-1}"
[[ "$ACCOUNTING" == 0 || "$ACCOUNTING" == 1 ]] || {
    echo "[rightsize-slurm] ERROR: RIGHTSIZE_SLURM_ACCOUNTING must be 0 or 1, got '$ACCOUNTING'" >&2
    exit 1
}
DB_DIR="$STATE_DIR/mysql"
DB_SOCK="$STATE_DIR/mysql.sock"
CONF="$STATE_DIR/slurm.conf"
HOST="$(hostname -s)"

log() { echo "[rightsize-slurm] $*" >&2; }
die() {
    echo "[rightsize-slurm] ERROR: $*" >&2
    for f in slurmctld.log slurmd.log slurmdbd.log mariadb.log; do
        if [[ -s "$STATE_DIR/$f" ]]; then
            echo "---- last lines of $STATE_DIR/$f ----" >&2
            tail -n 15 "$STATE_DIR/$f" >&2 || true
        fi
    done
    exit 1
}

pid_alive() {  # pid_alive <pidfile> <expected comm>
    local pf="$1" name="$2" pid
    [[ -s "$pf" ]] || return 1
    pid="$(cat "$pf" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 1
    # a killed but not yet reaped daemon is a zombie: treat as dead
    local st
    st="$(sed -n 's/^.*) \([A-Za-z]\).*/\1/p' "/proc/$pid/stat" 2>/dev/null)"
    [[ -n "$st" && "$st" != "Z" && "$st" != "X" ]]
}

node_state() {
    SLURM_CONF="$CONF" timeout 10 sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n 1 || true
}

[[ "$(id -u)" -eq 0 ]] || die "must run as root (slurmd and munged need it)"

accounting_up() {  # accounting as asked for: slurmdbd + MariaDB up, or not asked for
    if [[ "$ACCOUNTING" == 0 ]]; then
        ! grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$CONF"
        return
    fi
    grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$CONF" \
        && pid_alive "$STATE_DIR/mariadb.pid" mariadbd \
        && pid_alive "$STATE_DIR/slurmdbd.pid" slurmdbd
}

# --------------------------------------------------------------------------
# 0. Already running? -> no-op
# --------------------------------------------------------------------------
if [[ -f "$CONF" ]] && pid_alive "$STATE_DIR/slurmctld.pid" slurmctld \
        && pid_alive "$STATE_DIR/slurmd.pid" slurmd \
        && accounting_up \
        && SLURM_CONF="$CONF" timeout 10 scontrol ping >/dev/null 2>&1; then
    log "cluster already running (state dir $STATE_DIR, node state: $(node_state)); nothing to do"
    echo "export SLURM_CONF=$CONF"
    exit 0
fi

# --------------------------------------------------------------------------
# 1. Install packages if missing
# --------------------------------------------------------------------------
PACKAGES=(slurm-wlm munge)
[[ "$ACCOUNTING" == 1 ]] && PACKAGES+=(slurmdbd mariadb-server)
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
        || ! command -v munged >/dev/null 2>&1 || ! command -v sinfo >/dev/null 2>&1 \
        || { [[ "$ACCOUNTING" == 1 ]] && { ! command -v slurmdbd >/dev/null 2>&1 \
            || ! command -v mariadbd >/dev/null 2>&1; }; }; then
    log "installing ${PACKAGES[*]} via apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # Keep package postinst scripts from starting daemons with the distro
    # config; we run our own daemons with our own config.
    POLICY=/usr/sbin/policy-rc.d
    added_policy=0
    if [[ ! -e "$POLICY" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$POLICY" && chmod 755 "$POLICY" && added_policy=1
    fi
    mkdir -p "$STATE_DIR"
    apt_install() {
        apt-get install -y --no-install-recommends "${PACKAGES[@]}" >>"$STATE_DIR/apt.log" 2>&1
    }
    if ! apt_install; then
        log "apt-get install failed; running apt-get update and retrying"
        apt-get update >>"$STATE_DIR/apt.log" 2>&1 || true
        if ! apt_install; then
            [[ $added_policy -eq 1 ]] && rm -f "$POLICY"
            tail -n 20 "$STATE_DIR/apt.log" >&2 || true
            die "apt-get install ${PACKAGES[*]} failed (log: $STATE_DIR/apt.log)"
        fi
    fi
    [[ $added_policy -eq 1 ]] && rm -f "$POLICY"
    command -v slurmctld >/dev/null 2>&1 || die "slurmctld still missing after install"
fi

# --------------------------------------------------------------------------
# 2. munge: key + daemon
# --------------------------------------------------------------------------
munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

if ! munge_ok; then
    getent passwd munge >/dev/null || die "user 'munge' does not exist (broken munge install?)"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating munge key"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    # stale socket/pid from a dead munged would block startup
    if ! pgrep -u munge -x munged >/dev/null 2>&1; then
        rm -f /run/munge/munged.pid /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    fi
    log "starting munged"
    if command -v runuser >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged || true
    else
        su -s /bin/sh munge -c /usr/sbin/munged || true
    fi
    for _ in $(seq 1 20); do munge_ok && break; sleep 0.25; done
    munge_ok || die "munged is not working (see /var/log/munge/munged.log)"
fi

# --------------------------------------------------------------------------
# 3. Stop leftovers from a half-running cluster in this state dir
# --------------------------------------------------------------------------
for d in slurmd slurmctld slurmdbd; do
    if pid_alive "$STATE_DIR/$d.pid" "$d"; then
        pid="$(cat "$STATE_DIR/$d.pid")"
        log "stopping stale $d (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE_DIR/$d.pid"
done

port_busy() { command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Default ports taken (another cluster, another session's test run)? Pick free ones,
# unless the caller pinned them.
if [[ -z "${RIGHTSIZE_SLURMCTLD_PORT:-}" ]] && port_busy "$CTLD_PORT"; then
    CTLD_PORT="$(free_port)"; log "port 6817 busy; slurmctld uses $CTLD_PORT"
fi
if [[ -z "${RIGHTSIZE_SLURMD_PORT:-}" ]] && port_busy "$SLURMD_PORT"; then
    SLURMD_PORT="$(free_port)"; log "port 6818 busy; slurmd uses $SLURMD_PORT"
fi
if [[ "$ACCOUNTING" == 1 ]]; then
    if [[ -z "${RIGHTSIZE_SLURMDBD_PORT:-}" ]] && port_busy "$DBD_PORT"; then
        DBD_PORT="$(free_port)"; log "port 6819 busy; slurmdbd uses $DBD_PORT"
    fi
    # A MariaDB of this state dir that still runs keeps its port (it is ours).
    if pid_alive "$STATE_DIR/mariadb.pid" mariadbd && [[ -s "$STATE_DIR/mariadb.port" ]]; then
        DB_PORT="$(cat "$STATE_DIR/mariadb.port")"
    elif [[ -z "${RIGHTSIZE_SLURM_DB_PORT:-}" ]] && port_busy "$DB_PORT"; then
        DB_PORT="$(free_port)"; log "port 3306 busy; MariaDB uses $DB_PORT"
    fi
fi

# Another slurm instance (e.g. distro service) holding pinned ports?
if command -v ss >/dev/null 2>&1; then
    PORTS=("$CTLD_PORT" "$SLURMD_PORT")
    [[ "$ACCOUNTING" == 1 ]] && PORTS+=("$DBD_PORT")
    for p in "${PORTS[@]}"; do
        if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
            die "TCP port $p is already in use by another process (another slurm?); stop it or set RIGHTSIZE_SLURMCTLD_PORT/RIGHTSIZE_SLURMD_PORT"
        fi
    done
fi

# --------------------------------------------------------------------------
# 4. Generate config
# --------------------------------------------------------------------------
mkdir -p "$STATE_DIR/spool/slurmd" "$STATE_DIR/state"
chmod 755 "$STATE_DIR"

HWLINE="$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -n 1)" || true
[[ -n "$HWLINE" ]] || die "'slurmd -C' did not report node hardware"
hw() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<" $HWLINE"; }
CPUS="$(hw CPUs)"
BOARDS="$(hw Boards)"
SOCKETS="$(hw SocketsPerBoard)"
CORES="$(hw CoresPerSocket)"
THREADS="$(hw ThreadsPerCore)"
MEM_TOTAL="$(hw RealMemory)"
[[ "$CPUS" =~ ^[0-9]+$ && "$MEM_TOTAL" =~ ^[0-9]+$ ]] || die "cannot parse 'slurmd -C': $HWLINE"
# leave ~5% (at least 256 MB, at most 2 GB) for the OS
RESERVE=$(( MEM_TOTAL / 20 ))
(( RESERVE < 256 )) && RESERVE=256
(( RESERVE > 2048 )) && RESERVE=2048
REAL_MEM=$(( MEM_TOTAL - RESERVE ))
(( REAL_MEM > 0 )) || die "not enough memory: slurmd -C reports RealMemory=$MEM_TOTAL"
MEM_PER_CPU=$(( REAL_MEM / CPUS ))
DEBUG_DEF_MEM_PER_CPU=$(( MEM_PER_CPU < 1024 ? MEM_PER_CPU : 1024 ))
DEBUG_MAX_MEM_PER_NODE=$(( REAL_MEM < 4096 ? REAL_MEM : 4096 ))

TOPO="CPUs=$CPUS"
if [[ -n "$BOARDS" && -n "$SOCKETS" && -n "$CORES" && -n "$THREADS" ]]; then
    TOPO="$TOPO Boards=$BOARDS SocketsPerBoard=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS"
fi

if [[ "$ACCOUNTING" == 1 ]]; then
    ACCOUNTING_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT"
else
    ACCOUNTING_LINES="AccountingStorageType=accounting_storage/none"
fi

NEW_CONF="$(mktemp "$STATE_DIR/slurm.conf.XXXXXX")"
cat >"$NEW_CONF" <<EOF
# Generated by scripts/slurm/start.sh (Rightsize) -- do not edit, regenerated on start.
ClusterName=rightsize
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$STATE_DIR/spool/slurmd
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$STATE_DIR/slurmctld.log
SlurmdLogFile=$STATE_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=5
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE_DIR/jobcomp.log
$ACCOUNTING_LINES
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
EnforcePartLimits=ALL
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0

NodeName=$HOST NodeAddr=127.0.0.1 $TOPO RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=00:01:00 DefaultTime=00:01:00 MaxNodes=1 DefMemPerCPU=$DEBUG_DEF_MEM_PER_CPU MaxMemPerNode=$DEBUG_MAX_MEM_PER_NODE State=UP
PartitionName=batch Nodes=$HOST Default=NO MaxTime=00:10:00 DefaultTime=00:05:00 MaxNodes=1 DefMemPerCPU=$MEM_PER_CPU State=UP
EOF
mv -f "$NEW_CONF" "$CONF"
chmod 644 "$CONF"

export SLURM_CONF="$CONF"
touch "$STATE_DIR/jobcomp.log"

# --------------------------------------------------------------------------
# 5. Accounting: MariaDB (private datadir, 127.0.0.1) and slurmdbd
# --------------------------------------------------------------------------
db() { timeout 20 mariadb --no-defaults --socket="$DB_SOCK" -u root "$@"; }

if [[ "$ACCOUNTING" == 1 ]]; then
    if ! pid_alive "$STATE_DIR/mariadb.pid" mariadbd; then
        if [[ ! -d "$DB_DIR/mysql" ]]; then
            log "creating the accounting database's datadir ($DB_DIR)"
            rm -rf "$DB_DIR"
            mariadb-install-db --no-defaults --datadir="$DB_DIR" --user=root \
                --auth-root-authentication-method=socket --skip-test-db \
                >>"$STATE_DIR/mariadb.log" 2>&1 || die "mariadb-install-db failed"
        fi
        log "starting MariaDB on 127.0.0.1:$DB_PORT"
        rm -f "$DB_SOCK" "$STATE_DIR/mariadb.pid"
        setsid mariadbd --no-defaults --datadir="$DB_DIR" --socket="$DB_SOCK" --user=root \
            --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$STATE_DIR/mariadb.pid" \
            --log-error="$STATE_DIR/mariadb.log" --innodb-buffer-pool-size=64M \
            </dev/null >>"$STATE_DIR/mariadb.log" 2>&1 &
        for _ in $(seq 1 120); do db -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.25; done
        db -e 'SELECT 1' >/dev/null 2>&1 || die "MariaDB does not answer on $DB_SOCK"
        echo "$DB_PORT" >"$STATE_DIR/mariadb.port"
    fi
    db -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'rightsize';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'rightsize';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" \
        || die "cannot create the slurm database user"

    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it must be 0600, owned by SlurmUser.
    DBD_CONF="$STATE_DIR/slurmdbd.conf"
    cat >"$DBD_CONF" <<EOF
# Generated by scripts/slurm/start.sh (Rightsize) -- do not edit, regenerated on start.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$STATE_DIR/slurmdbd.pid
LogFile=$STATE_DIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=rightsize
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DBD_CONF"

    log "starting slurmdbd on port $DBD_PORT"
    slurmdbd >>"$STATE_DIR/daemon-start.log" 2>&1 || die "slurmdbd failed to start"
    for _ in $(seq 1 80); do
        timeout 5 sacctmgr -n -P show cluster >/dev/null 2>&1 && break
        sleep 0.25
    done
    timeout 5 sacctmgr -n -P show cluster >/dev/null 2>&1 || die "slurmdbd does not answer sacctmgr"
    if ! timeout 5 sacctmgr -n -P show cluster format=cluster | grep -qx rightsize; then
        timeout 10 sacctmgr -i add cluster rightsize >/dev/null || die "cannot register the cluster"
    fi
fi

# --------------------------------------------------------------------------
# 6. Start daemons
# --------------------------------------------------------------------------
log "starting slurmctld"
slurmctld -f "$CONF" -i >>"$STATE_DIR/daemon-start.log" 2>&1 || die "slurmctld failed to start"
for _ in $(seq 1 40); do
    timeout 5 scontrol ping >/dev/null 2>&1 && break
    sleep 0.25
done
timeout 5 scontrol ping >/dev/null 2>&1 || die "slurmctld does not answer 'scontrol ping'"

log "starting slurmd"
slurmd -f "$CONF" >>"$STATE_DIR/daemon-start.log" 2>&1 || die "slurmd failed to start"

# --------------------------------------------------------------------------
# 7. Wait for the node to become idle
# --------------------------------------------------------------------------
deadline=$(( SECONDS + WAIT_S ))
resumed=0
state=""
while (( SECONDS < deadline )); do
    state="$(node_state)"
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        down*|drain*|drained*|fail*)
            if (( resumed == 0 )) && pid_alive "$STATE_DIR/slurmd.pid" slurmd; then
                scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
                resumed=1
            fi ;;
    esac
    pid_alive "$STATE_DIR/slurmctld.pid" slurmctld || die "slurmctld died during startup"
    sleep 0.5
done
case "$state" in
    idle|mixed|allocated|completing) ;;
    *) die "node $HOST not idle after ${WAIT_S}s (state: '${state:-unknown}')" ;;
esac
pid_alive "$STATE_DIR/slurmd.pid" slurmd || die "slurmd is not running"

if [[ "$ACCOUNTING" == 1 ]]; then
    ACCT="accounting: slurmdbd :$DBD_PORT on MariaDB :$DB_PORT (sacct)"
else
    ACCT="accounting: jobcomp file only"
fi
log "cluster up: node $HOST ($CPUS CPUs, ${REAL_MEM} MB) is $state; partitions debug (1 min), batch (10 min); $ACCT"
echo "export SLURM_CONF=$CONF"
