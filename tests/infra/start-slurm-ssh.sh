#!/usr/bin/env bash
# start-slurm-ssh.sh - the test infrastructure of tests/remote: a real single-node Slurm
# (munged + slurmctld + slurmd) and a real OpenSSH server on 127.0.0.1:$SSH_PORT with key-only
# auth for the user $SSH_USER, plus an httk installation that user can run.
#
# Usage:  bash tests/infra/start-slurm-ssh.sh [start|stop|status]      (default: start)
#   start   install missing Debian packages (--no-install-recommends), write the configs, start
#           what is not running, install this checkout into $CI_INFRA_DIR/httk-venv (again only
#           when the sources changed), run a smoke test, write $CI_INFRA_DIR/env. Idempotent.
#   stop    scancel all jobs, then stop each daemon by the PID in its pidfile (checked against
#           /proc/PID/comm; never pkill).
#   status  show what is running.
#
# Environment (optional): CI_INFRA_DIR=/var/lib/ci-slurm-ssh  SSH_PORT=2222  SSH_USER=httktest
#   KEEP_STATE=0 (0: a fresh slurmctld starts with -c)  SKIP_INSTALL=0  SMOKE_TEST=1
#   HTTK_PYTHON=/usr/bin/python3 (the interpreter of the ssh user's httk venv)
#
# Why a separate venv for the ssh user: the developer's venv usually lives below /root or a home
# directory other users cannot enter, and its interpreter may too (pyenv). The ssh user gets a
# non-editable install of this checkout made with the system Python, world-readable, at
# $CI_INFRA_DIR/httk-venv; the tests point the remote's httk_command at $CI_HTTK_COMMAND.
#
# Needs root and Debian bookworm (slurm-wlm 22.05). Every address used is 127.0.0.1/localhost.
# A non-zero exit prints "ERROR: ..." and the tail of the failing daemon's log.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

ACTION=${1:-start}
S=${CI_INFRA_DIR:-/var/lib/ci-slurm-ssh}
SSH_PORT=${SSH_PORT:-2222}
SSH_USER=${SSH_USER:-httktest}
KEEP_STATE=${KEEP_STATE:-0}
SKIP_INSTALL=${SKIP_INSTALL:-0}
SMOKE_TEST=${SMOKE_TEST:-1}
HTTK_PYTHON=${HTTK_PYTHON:-/usr/bin/python3}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Node and controller are "localhost", not the hostname, so nothing depends on what `hostname` says.
NODE=localhost
SLURM_CONF=/etc/slurm/slurm.conf
MUNGE_PID=/run/munge/munged.pid
CTLD_PID=/run/slurm/slurmctld.pid
SLURMD_PID=/run/slurm/slurmd.pid
SSHD_PID=/run/ci-sshd.pid
SSHD_LOG=/var/log/ci-sshd.log
SSH_KEY=$S/ssh/id_ed25519
SSH_OPTS=(-n -p "$SSH_PORT" -i "$SSH_KEY" -o BatchMode=yes -o IdentitiesOnly=yes
          -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$S/ssh/known_hosts"
          -o LogLevel=ERROR -o ConnectTimeout=5)
VENV=$S/httk-venv

ms_now() { echo $(( $(date +%s%N) / 1000000 )); }
T_START=$(ms_now)
secs() { local d=$(( $(ms_now) - $1 )); printf '%d.%02d' $((d / 1000)) $(( (d % 1000) / 10 )); }
log()  { printf '[infra %6ss] %s\n' "$(secs "$T_START")" "$*"; }
die()  { printf '\n[infra] ERROR: %s\n' "$*" >&2; exit 1; }
showlog() { [ -f "$1" ] && { echo "---- last lines of $1 ----" >&2; tail -n "${2:-25}" "$1" >&2; echo "----" >&2; } || true; }

[ "$(id -u)" = 0 ] || die "must run as root"

# alive PID: exists and is not a zombie (PID 1 may reap late, so a dead daemon lingers as Z)
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# pid_of PIDFILE COMM -> the PID, if that pidfile names a live process called COMM
pid_of() {
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && alive "$pid" || return 1
  echo "$pid"
}

# stop_pid PIDFILE COMM: SIGTERM the PID of the pidfile, SIGKILL after 15 s
stop_pid() {
  local pid i
  if pid=$(pid_of "$1" "$2"); then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 150); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; sleep 0.2; fi
    echo "stopped $2 (pid $pid)"
  else
    echo "$2: not running"
  fi
  rm -f "$1"
}

# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds
wait_for() {
  local n=$(( $1 * 10 )); shift
  while [ $n -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}

ctld_up()    { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1; }
node_ok()    { case "$(node_state)" in idle|mixed|allocated|completing) return 0;; *) return 1;; esac; }

do_stop() {
  if command -v scontrol >/dev/null && ctld_up; then
    local ids; ids=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$ids" ]; then
      echo "cancelling jobs: $(echo $ids)"; scancel $ids || true
      wait_for 20 bash -c '[ -z "$(squeue -h -o %i)" ]' || echo "warning: jobs still listed after 20 s"
    fi
  fi
  stop_pid "$SSHD_PID" sshd
  stop_pid "$SLURMD_PID" slurmd
  stop_pid "$CTLD_PID" slurmctld
  stop_pid "$MUNGE_PID" munged
}

do_status() {
  local f c p
  for f in "$MUNGE_PID:munged" "$CTLD_PID:slurmctld" "$SLURMD_PID:slurmd" "$SSHD_PID:sshd"; do
    c=${f##*:}; f=${f%:*}
    if p=$(pid_of "$f" "$c"); then echo "$c: running, pid $p"; else echo "$c: not running"; fi
  done
  command -v sinfo >/dev/null && ctld_up && sinfo || true
  [ -f "$S/env" ] && { echo "--- $S/env"; cat "$S/env"; } || true
}

case "$ACTION" in
  stop)   do_stop; exit 0 ;;
  status) do_status; exit 0 ;;
  start)  ;;
  *)      die "usage: $0 [start|stop|status]" ;;
esac

########################################################################## 1. packages
PKGS=(munge slurmctld slurmd slurm-client openssh-server openssh-client python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$SKIP_INSTALL" = 1 ] && die "missing packages and SKIP_INSTALL=1: ${missing[*]}"
  log "installing: ${missing[*]}"
  # Keep the packages' maintainer scripts from starting sshd on 0.0.0.0:22, munge, slurm...
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
  fi
  trap '[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -q >/tmp/ci-slurm-ssh-apt.log 2>&1 || { showlog /tmp/ci-slurm-ssh-apt.log; die "apt-get update failed"; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
      >>/tmp/ci-slurm-ssh-apt.log 2>&1 || { showlog /tmp/ci-slurm-ssh-apt.log; die "apt-get install failed"; }
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d; trap - EXIT
  log "packages installed"
else
  log "packages already installed"
fi

mkdir -p "$S" /run/slurm /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
chmod 755 "$S"  # the ssh user runs $S/httk-venv/bin/httk

# write_conf PATH MODE (content on stdin); sets CONF_CHANGED=1 when the file changed
write_conf() {
  local tmp; tmp=$(mktemp)
  cat > "$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; else
    install -m "$2" "$tmp" "$1"; rm -f "$tmp"; CONF_CHANGED=1; log "wrote $1"
  fi
}

########################################################################## 2. munge
# munged refuses to start unless its key and directories belong to munge and the key is private.
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  log "created /etc/munge/munge.key"
fi
chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key; chmod 755 /run/munge
if p=$(pid_of "$MUNGE_PID" munged) && munge -n </dev/null | unmunge >/dev/null 2>&1; then
  log "munged already running (pid $p)"
else
  rm -f "$MUNGE_PID"
  runuser -u munge -- /usr/sbin/munged || { showlog /var/log/munge/munged.log; die "munged failed to start"; }
  wait_for 10 bash -c 'munge -n </dev/null | unmunge' || { showlog /var/log/munge/munged.log; die "munge -n | unmunge fails"; }
  log "started munged (pid $(cat $MUNGE_PID))"
fi

########################################################################## 3. slurm.conf
# NoInAddrAny binds the first IPv4 address `hostname` resolves to: loopback-only exactly when
# that is 127.x. Otherwise the daemons would stop answering on 127.0.0.1, so only then is the
# option left out (they listen on 0.0.0.0; all traffic still goes to 127.0.0.1).
HN_ADDR=$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk 'NR==1{print $1}' || true)
if [[ "$HN_ADDR" == 127.* ]]; then
  COMM_LINE="CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
else
  COMM_LINE="# hostname '$(hostname)' resolves to '${HN_ADDR:-nothing}', not 127.x: daemons bind 0.0.0.0"
fi
NCPU=$(nproc)
MEM=$(( $(awk '/^MemTotal/{print int($2/1024)}' /proc/meminfo) * 9 / 10 ))  # above the real memory drains the node
CONF_CHANGED=0
write_conf "$SLURM_CONF" 644 <<EOF
# generated by tests/infra/start-slurm-ssh.sh - single node, loopback only
ClusterName=ci
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
${COMM_LINE}
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# start a pending job within about a second of a free CPU (the default batch_sched_delay is 3 s)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# finished jobs stay visible to 'squeue -t all' for an hour (there is no accounting)
MinJobAge=3600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=${NODE} NodeAddr=127.0.0.1 NodeHostname=${NODE} CPUs=${NCPU} RealMemory=${MEM} State=UNKNOWN
PartitionName=batch Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOF
SLURM_CONF_CHANGED=$CONF_CHANGED

########################################################################## 4. slurmctld + slurmd
if p=$(pid_of "$CTLD_PID" slurmctld) && [ "$SLURM_CONF_CHANGED" = 0 ] && ctld_up; then
  log "slurmctld already running (pid $p)"
else
  # slurmctld and slurmd kill the instance named in their pidfile when they start: stop first.
  [ "$SLURM_CONF_CHANGED" = 1 ] && { stop_pid "$SLURMD_PID" slurmd >/dev/null; stop_pid "$CTLD_PID" slurmctld >/dev/null; }
  rm -f "$CTLD_PID"
  CTLD_ARGS=(); [ "$KEEP_STATE" = 1 ] || CTLD_ARGS=(-c)
  /usr/sbin/slurmctld "${CTLD_ARGS[@]}" || { showlog /var/log/slurm/slurmctld.log; die "slurmctld failed to start (debug: /usr/sbin/slurmctld -Dvvv)"; }
  wait_for 30 ctld_up || { showlog /var/log/slurm/slurmctld.log; die "slurmctld not answering 'scontrol ping'"; }
  log "started slurmctld (pid $(cat $CTLD_PID))"
fi
if p=$(pid_of "$SLURMD_PID" slurmd); then
  log "slurmd already running (pid $p)"
else
  rm -f "$SLURMD_PID"
  /usr/sbin/slurmd -N "$NODE" || { showlog /var/log/slurm/slurmd.log; die "slurmd failed to start (debug: /usr/sbin/slurmd -Dvvv -N $NODE)"; }
  wait_for 15 pid_of "$SLURMD_PID" slurmd || { showlog /var/log/slurm/slurmd.log; die "slurmd exited after start"; }
  log "started slurmd (pid $(cat $SLURMD_PID))"
fi
if ! wait_for 30 node_ok; then
  st=$(node_state)
  if [[ "$st" == *drain* || "$st" == down* ]]; then
    scontrol update nodename="$NODE" state=resume 2>/dev/null || true
    wait_for 10 node_ok || true
  fi
  node_ok || { sinfo -R >&2 || true; showlog /var/log/slurm/slurmd.log; die "node $NODE is '$(node_state)', not idle"; }
fi
log "node $NODE is $(node_state)"

########################################################################## 5. sshd on 127.0.0.1
mkdir -p "$S/ssh" /run/sshd; chmod 700 "$S/ssh"; chmod 755 /run/sshd  # /run/sshd: privsep dir
if ! id "$SSH_USER" >/dev/null 2>&1; then
  useradd -m -s /bin/bash "$SSH_USER"; log "created user $SSH_USER"
fi
# With UsePAM no, sshd rejects a locked account ('!') even for key auth; '*' is unusable but unlocked.
if [ "$SSH_USER" != root ] && [[ "$(getent shadow "$SSH_USER" | cut -d: -f2)" == '!'* ]]; then
  usermod -p '*' "$SSH_USER"
fi
HOME_DIR=$(getent passwd "$SSH_USER" | cut -d: -f6)
USER_GROUP=$(id -gn "$SSH_USER")
[ -f "$S/ssh/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C ci-sshd-hostkey -f "$S/ssh/ssh_host_ed25519_key"
[ -f "$SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C ci-test-client -f "$SSH_KEY"
echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1,2 "$S/ssh/ssh_host_ed25519_key.pub")" > "$S/ssh/known_hosts"
install -d -m 700 -o "$SSH_USER" -g "$USER_GROUP" "$HOME_DIR/.ssh"
AK=$HOME_DIR/.ssh/authorized_keys
grep -qxF "$(cat "$SSH_KEY.pub")" "$AK" 2>/dev/null || cat "$SSH_KEY.pub" >> "$AK"
chown "$SSH_USER:$USER_GROUP" "$AK"; chmod 600 "$AK"
CONF_CHANGED=0
write_conf "$S/ssh/sshd_config" 600 <<EOF
# generated by tests/infra/start-slurm-ssh.sh - loopback only, key only
ListenAddress 127.0.0.1
Port $SSH_PORT
HostKey $S/ssh/ssh_host_ed25519_key
PidFile $SSHD_PID
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $SSH_USER
UsePAM no
X11Forwarding no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 50
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel INFO
EOF
/usr/sbin/sshd -t -f "$S/ssh/sshd_config" || die "sshd config test failed"
if p=$(pid_of "$SSHD_PID" sshd) && [ "$CONF_CHANGED" = 0 ]; then
  log "sshd already running (pid $p)"
else
  stop_pid "$SSHD_PID" sshd >/dev/null
  # ss (iproute2) only makes the message clearer; without it sshd's own bind error says it.
  if command -v ss >/dev/null && ss -Hltn "sport = :$SSH_PORT" | grep -q .; then
    ss -Hltnp "sport = :$SSH_PORT" >&2; die "port $SSH_PORT is already taken by another process"
  fi
  /usr/sbin/sshd -f "$S/ssh/sshd_config" -E "$SSHD_LOG" || { showlog "$SSHD_LOG"; die "sshd failed to start (debug: /usr/sbin/sshd -D -d -f $S/ssh/sshd_config)"; }
  wait_for 10 test -s "$SSHD_PID" || { showlog "$SSHD_LOG"; die "sshd wrote no pidfile"; }
  log "started sshd on 127.0.0.1:$SSH_PORT (pid $(cat $SSHD_PID))"
fi
wait_for 10 ssh "${SSH_OPTS[@]}" "$SSH_USER@127.0.0.1" true \
  || { showlog "$SSHD_LOG"; die "ssh $SSH_USER@127.0.0.1:$SSH_PORT with $SSH_KEY fails"; }
log "ssh $SSH_USER@127.0.0.1 -p $SSH_PORT works"

########################################################################## 6. httk for the ssh user
# A non-editable install of this checkout, rebuilt only when its sources changed (the hash
# covers what goes into the wheel), so a second start costs nothing here.
source_hash() {
  (cd "$REPO" && find -L pyproject.toml src adapters shell -type f -not -path '*/__pycache__/*' -print0 \
     | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
HASH=$(source_hash)
if [ ! -x "$VENV/bin/python" ]; then
  "$HTTK_PYTHON" -m venv "$VENV" || die "could not create $VENV with $HTTK_PYTHON (is python3-venv installed?)"
  "$VENV/bin/python" -m pip install -q --upgrade pip hatchling >/tmp/ci-httk-venv.log 2>&1 \
    || { showlog /tmp/ci-httk-venv.log; die "pip could not install hatchling into $VENV"; }
  log "created $VENV"
fi
if [ "$(cat "$VENV/.source-hash" 2>/dev/null)" != "$HASH" ]; then
  # --no-build-isolation: hatchling is in the venv already, so a rebuild needs no index.
  "$VENV/bin/python" -m pip install -q --no-build-isolation --force-reinstall "$REPO" >/tmp/ci-httk-venv.log 2>&1 \
    || { showlog /tmp/ci-httk-venv.log; die "pip could not install $REPO into $VENV"; }
  echo "$HASH" > "$VENV/.source-hash"
  log "installed $REPO into $VENV"
else
  log "$VENV is up to date with $REPO"
fi
chmod -R a+rX "$VENV"
VERSION=$(ssh "${SSH_OPTS[@]}" "$SSH_USER@127.0.0.1" "$VENV/bin/httk --version") \
  || die "$SSH_USER cannot run $VENV/bin/httk"
log "as $SSH_USER: $VERSION"
WORK_ROOT=$HOME_DIR/httk-ci
install -d -m 755 -o "$SSH_USER" -g "$USER_GROUP" "$WORK_ROOT"

########################################################################## 7. env file for the tests
cat > "$S/env" <<EOF
# written by tests/infra/start-slurm-ssh.sh; tests/remote reads it
CI_SSH_HOST=127.0.0.1
CI_SSH_PORT=$SSH_PORT
CI_SSH_USER=$SSH_USER
CI_SSH_KEY=$SSH_KEY
CI_SSH_KNOWN_HOSTS=$S/ssh/known_hosts
CI_SLURM_PARTITION=batch
CI_SLURM_NODE=$NODE
CI_HTTK_COMMAND=$VENV/bin/httk
CI_HTTK_SOURCE_HASH=$HASH
CI_WORK_ROOT=$WORK_ROOT
CI_INFRA_DIR=$S
EOF

########################################################################## 8. smoke test
wait_state() {  # wait_state JOBID SECONDS -> the final state (or the last one seen)
  local id=$1 n=$(( $2 * 10 )) st=""
  while [ $n -gt 0 ]; do
    st=$(squeue -h -t all -j "$id" -o %T 2>/dev/null || true)
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) echo "$st"; return 0;; esac
    sleep 0.1; n=$((n - 1))
  done
  echo "${st:-UNKNOWN}"
}
if [ "$SMOKE_TEST" = 1 ]; then
  t0=$(ms_now)
  jid=$(ssh "${SSH_OPTS[@]}" "$SSH_USER@127.0.0.1" "cd ~ && sbatch --parsable -J ci-smoke -o ci-smoke-%j.out --wrap 'id -un'") \
    || die "sbatch over ssh failed"
  st=$(wait_state "$jid" 30)
  [ "$st" = COMPLETED ] && grep -qx "$SSH_USER" "$HOME_DIR/ci-smoke-$jid.out" \
    || { scontrol show job "$jid" >&2 || true; showlog /var/log/slurm/slurmd.log; die "smoke job $jid ended '$st'"; }
  rm -f "$HOME_DIR/ci-smoke-$jid.out"
  log "smoke: sbatch over ssh as $SSH_USER, job $jid COMPLETED in $(secs "$t0")s"
fi

log "ready. env: $S/env   stop: bash $0 stop"
