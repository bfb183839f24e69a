#!/bin/bash
# hvd-cluster node entrypoint (PID 1 is tini): what cloud-init + systemd do on a cloud VM.
#
# Environment:
#   NODE_USER                 login user (image default: debian), key auth only, passwordless sudo
#   SSH_AUTHORIZED_KEYS       public key line(s) for NODE_USER              } either or both;
#   SSH_AUTHORIZED_KEYS_FILE  file with key lines (default /etc/hvd-cluster/authorized_keys,
#                             e.g. a read-only bind mount)                  } no key = no login
#   DOCKER_STORAGE_DRIVER     auto (default: overlay2, then fuse-overlayfs, then vfs) or one of them
#   DOCKERD_ARGS              extra dockerd arguments
#   NODE_DOCKERD              1 (default) starts the inner Docker engine; 0 = sshd only
# Mounts: a volume on /var/lib/docker (required for dockerd: the container's own root is an overlay).
# Privileged container required (dockerd, mounts, nfs-ganesha).
# cloud-init: only when a NoCloud seed exists (/var/lib/cloud/seed/nocloud/meta-data, written by
# the test cloud's compute driver before the container starts): its four stages run in the
# background once sshd is up (output in `docker logs`); `cloud-init status --wait` tells when they
# are done. No seed: cloud-init never runs (`cloud-init status` says `not run`, and `--wait`
# would wait forever, as on any VM without systemd whose cloud-init was not started).
# Files: /run/hvd-cluster/storage-driver (driver + why), /run/hvd-cluster/ready, /var/log/dockerd.log
set -uo pipefail
NODE_USER=${NODE_USER:-debian}
KEYS_FILE=${SSH_AUTHORIZED_KEYS_FILE:-/etc/hvd-cluster/authorized_keys}
DRIVER=${DOCKER_STORAGE_DRIVER:-auto}
NODE_DOCKERD=${NODE_DOCKERD:-1}
RUN=/run/hvd-cluster
mkdir -p "$RUN" /run/sshd
log() { echo "hvd-node: $*"; }

# --- login user's keys
home=$(getent passwd "$NODE_USER" | cut -d: -f6)
[ -n "$home" ] || { log "no user $NODE_USER"; exit 1; }
ak=$home/.ssh/authorized_keys
install -d -m 700 -o "$NODE_USER" -g "$NODE_USER" "$home/.ssh"
{ [ -n "${SSH_AUTHORIZED_KEYS:-}" ] && printf '%s\n' "$SSH_AUTHORIZED_KEYS"
  [ -r "$KEYS_FILE" ] && cat "$KEYS_FILE"; true; } > "$ak.new"
chown "$NODE_USER:$NODE_USER" "$ak.new"; chmod 600 "$ak.new"; mv "$ak.new" "$ak"
log "$(grep -c . "$ak") authorized key(s) for $NODE_USER"
unset SSH_AUTHORIZED_KEYS

# --- per-node host keys (kept across restarts of the same container), shown on the console
# (this container's output, what `docker logs` and the test cloud's console API read) in the
# block cloud-init's keys_to_console prints on a cloud server: where hvd-cluster takes a new key
# from when a server it started or re-made comes back with one
ssh-keygen -A > /dev/null
echo "-----BEGIN SSH HOST KEY KEYS-----"
cat /etc/ssh/ssh_host_*_key.pub
echo "-----END SSH HOST KEY KEYS-----"

# --- /run is no tmpfs in a container: drop the last boot's state as a reboot would. cloud-init's,
# and the inner engine's (a container made from a committed node, as the test cloud's snapshot
# makes it, carries its pid file: dockerd refuses to start when that pid is alive again)
rm -rf /run/cloud-init /run/docker /run/docker.pid /run/docker.sock /run/containerd

# --- inner Docker engine
probe_overlay() {   # kernel overlayfs on the /var/lib/docker filesystem, as overlay2 would mount it
  local d=/var/lib/docker/.hvd-probe rc
  rm -rf "$d"; mkdir -p "$d"/{lower,upper,work,merged}
  echo x > "$d/lower/f"
  mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2> "$RUN/probe-overlay.err"
  rc=$?
  if [ $rc = 0 ]; then
    echo y > "$d/merged/f" 2>> "$RUN/probe-overlay.err" || rc=1
    umount "$d/merged"
  fi
  rm -rf "$d"; return $rc
}
probe_fuse_overlay() {
  local d=/var/lib/docker/.hvd-probe rc
  [ -c /dev/fuse ] || { echo "no /dev/fuse" > "$RUN/probe-fuse.err"; return 1; }
  rm -rf "$d"; mkdir -p "$d"/{lower,upper,work,merged}
  fuse-overlayfs -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2> "$RUN/probe-fuse.err"
  rc=$?
  [ $rc = 0 ] && { fusermount3 -u "$d/merged" 2>/dev/null || umount "$d/merged"; }
  rm -rf "$d"; return $rc
}
start_dockerd() {   # driver -> 0 when the engine answers
  local drv=$1
  dockerd --storage-driver="$drv" ${DOCKERD_ARGS:-} >> /var/log/dockerd.log 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 120); do
    if docker info > /dev/null 2>&1; then return 0; fi
    kill -0 "$DOCKERD_PID" 2>/dev/null || { wait "$DOCKERD_PID"; return 1; }
    sleep 0.25
  done
  kill "$DOCKERD_PID"; wait "$DOCKERD_PID"; return 1
}
DOCKERD_PID=
if [ "$NODE_DOCKERD" = 1 ]; then
  # Not --privileged (e.g. a host whose capability bounding set lacks CAP_SYS_RESOURCE, where
  # --privileged fails with "unable to apply caps"): run with --cap-add ALL --cap-drop SYS_RESOURCE
  # --security-opt seccomp=unconfined,apparmor=unconfined,systempaths=unconfined and make /sys and
  # the cgroup v1 mounts writable as --privileged would have.
  if grep -qE '^[^ ]+ /sys sysfs ro[, ]' /proc/mounts; then
    mount -o remount,rw /sys 2>/dev/null && log "remounted /sys rw" || log "WARNING: /sys read-only"
  fi
  awk '$3=="cgroup" && $4 ~ /^ro/ {print $2}' /proc/mounts | while read -r m; do
    mount -o remount,bind,rw "$m" 2>/dev/null || log "WARNING: cannot make $m writable"
  done
  fs=$(stat -f -c %T /var/lib/docker)
  mountpoint -q /var/lib/docker || log "WARNING: /var/lib/docker is not a volume (on $fs): only vfs can work"
  mount --make-rshared / 2>/dev/null || true   # bind propagation for inner containers
  case $DRIVER in
    auto)
      candidates=()
      if probe_overlay; then candidates+=(overlay2)
      else log "overlay2 unusable on $fs: $(tr '\n' ' ' < "$RUN/probe-overlay.err")"; fi
      if probe_fuse_overlay; then candidates+=(fuse-overlayfs)
      else log "fuse-overlayfs unusable: $(tr '\n' ' ' < "$RUN/probe-fuse.err")"; fi
      candidates+=(vfs) ;;
    *) candidates=("$DRIVER") ;;
  esac
  started=
  for drv in "${candidates[@]}"; do
    log "starting dockerd --storage-driver=$drv (/var/lib/docker on $fs)"
    if start_dockerd "$drv"; then started=$drv; break; fi
    log "dockerd with $drv failed: $(grep -iE 'level=(error|fatal)|failed' /var/log/dockerd.log | tail -n 2 | tr '\n' ' ')"
  done
  [ -n "$started" ] || { log "no storage driver worked; see /var/log/dockerd.log"; exit 1; }
  echo "$started fs=$fs tried=${candidates[*]} overlay-probe=$(tr '\n' ' ' < "$RUN/probe-overlay.err" 2>/dev/null)" > "$RUN/storage-driver"
  log "dockerd up (pid $DOCKERD_PID, storage driver $started)"
fi

# --- sshd
/usr/sbin/sshd -t || exit 1
/usr/sbin/sshd -D -e &
SSHD_PID=$!
if [ -f /var/lib/cloud/seed/nocloud/meta-data ]; then
  # the stages systemd would run at boot, in order; a failed stage does not stop the next
  ( for stage in "init --local" init "modules --mode=config" "modules --mode=final"; do
      cloud-init $stage || log "cloud-init $stage failed (rc=$?)"
    done ) < /dev/null &
  log "cloud-init started (NoCloud seed)"
fi

stop() {   # [exit code]
  log "stopping"
  kill -TERM "$SSHD_PID" 2>/dev/null
  [ -f /var/run/ganesha/ganesha.pid ] && kill -TERM "$(cat /var/run/ganesha/ganesha.pid)" 2>/dev/null
  if [ -n "$DOCKERD_PID" ]; then
    kill -TERM "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.25; done
  fi
  exit "${1:-0}"
}
trap stop TERM INT
touch "$RUN/ready"
log "ready: sshd (pid $SSHD_PID) on :22 for $NODE_USER"
# a cloud VM would restart a dead daemon; here the node exits and its restart policy decides
if [ -n "$DOCKERD_PID" ]; then wait -n "$SSHD_PID" "$DOCKERD_PID"; else wait "$SSHD_PID"; fi
rc=$?
log "a daemon exited (rc=$rc): sshd $(kill -0 $SSHD_PID 2>/dev/null && echo up || echo down), dockerd $( [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null && echo up || echo down)"
stop 1
