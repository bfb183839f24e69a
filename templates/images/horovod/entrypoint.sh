#!/bin/bash
# hvd-cluster horovod container entrypoint (PID 1 is tini). Runs as root with the node's host network.
#
# Environment:
#   HVD_SSH_PORT       sshd port (image default 12345), the port given to horovodrun -p
#   HVD_SSH_DIR        mounted key dir (default /etc/hvd-cluster/ssh), may be read-only:
#                        authorized_keys        required: keys allowed to log in as root
#                        id_ed25519             optional: private key for horovodrun/ssh from here
#                        ssh_host_ed25519_key   optional: stable host key (else one per container)
#   HVD_JUPYTER        1 = also run Jupyter Lab (the master); default 0
#   JUPYTER_TOKEN_FILE token file (default /etc/hvd-cluster/jupyter/token; read by the server config,
#                      never put in argv or the environment)
#   JUPYTER_PORT (8888) JUPYTER_IP (0.0.0.0) JUPYTER_ROOT_DIR (/shared)
# With arguments, runs them instead of the daemons (e.g. `docker run IMAGE horovodrun --check-build`).
set -uo pipefail
PORT=${HVD_SSH_PORT:-12345}
SSH_DIR=${HVD_SSH_DIR:-/etc/hvd-cluster/ssh}
log() { echo "hvd-horovod: $*"; }

[ $# -gt 0 ] && exec "$@"

install -d -m 700 /root/.ssh /run/sshd
if [ -r "$SSH_DIR/authorized_keys" ]; then
  install -m 600 "$SSH_DIR/authorized_keys" /root/.ssh/authorized_keys
else
  log "WARNING: no $SSH_DIR/authorized_keys: nobody can log in (horovodrun cannot reach this host)"
fi
[ -r "$SSH_DIR/id_ed25519" ] && install -m 600 "$SSH_DIR/id_ed25519" /root/.ssh/id_ed25519
[ -r "$SSH_DIR/id_ed25519.pub" ] && install -m 644 "$SSH_DIR/id_ed25519.pub" /root/.ssh/id_ed25519.pub
if [ -r "$SSH_DIR/ssh_host_ed25519_key" ]; then
  install -m 600 "$SSH_DIR/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
else
  [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
# plain `ssh <host>` between containers behaves like horovodrun's ssh
cat > /root/.ssh/config <<EOF
Host *
    Port $PORT
    IdentityFile /root/.ssh/id_ed25519
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
EOF
chmod 600 /root/.ssh/config

/usr/sbin/sshd -t -p "$PORT" -h /etc/ssh/ssh_host_ed25519_key || exit 1
/usr/sbin/sshd -D -e -p "$PORT" -h /etc/ssh/ssh_host_ed25519_key &
pids=($!)
log "sshd (pid ${pids[0]}) on :$PORT"

if [ "${HVD_JUPYTER:-0}" = 1 ]; then
  export JUPYTER_TOKEN_FILE=${JUPYTER_TOKEN_FILE:-/etc/hvd-cluster/jupyter/token}
  [ -s "$JUPYTER_TOKEN_FILE" ] || { log "HVD_JUPYTER=1 but no token in $JUPYTER_TOKEN_FILE"; exit 1; }
  mkdir -p "${JUPYTER_ROOT_DIR:-/shared}"
  (cd "${JUPYTER_ROOT_DIR:-/shared}" && exec jupyter lab --ip="${JUPYTER_IP:-0.0.0.0}" --port="${JUPYTER_PORT:-8888}" \
      --ServerApp.root_dir="${JUPYTER_ROOT_DIR:-/shared}" > /var/log/jupyter.log 2>&1) &
  pids+=($!)
  log "jupyter lab (pid ${pids[1]}) on ${JUPYTER_IP:-0.0.0.0}:${JUPYTER_PORT:-8888}, log /var/log/jupyter.log"
fi

trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 0' TERM INT
wait -n "${pids[@]}"
rc=$?
log "a daemon exited (rc=$rc), stopping"
kill -TERM "${pids[@]}" 2>/dev/null
exit 1
