#!/bin/sh
# hvd-cluster's runtime inside an image that is not ours (a user's own Horovod image). The
# container runs this as root with the node's host network; nothing of it is in the image: it
# comes from /opt/hvd-cluster/runtime, which the node mounts read-only (see runtime.apply.sh).
#   entry.sh                  serve: sshd on HVD_SSH_PORT for horovodrun, and Jupyter Lab on
#                             the master (HVD_JUPYTER=1), until one of them stops
#   entry.sh --probe          check that the image can serve; print what it has, one line
#   entry.sh --install-jupyter  the master of an image without Jupyter Lab: install it from
#                             PyPI with the image's own pip into PYTHONUSERBASE (a node folder)
# POSIX sh only: the image's /bin/sh may be dash or busybox.
KIT=/opt/hvd-cluster/runtime
PORT=${HVD_SSH_PORT:-12345}
log() { echo "hvd-cluster runtime: $*"; }
fail() { echo "$*" >&2; exit 1; }

image_python() { command -v python3 2>/dev/null || command -v python 2>/dev/null; }

# The login shell of root in the image's /etc/passwd: sshd runs every horovodrun command in it.
root_shell() {
  while IFS=: read -r name _ _ _ _ _ shell; do
    if [ "$name" = root ]; then echo "${shell:-/bin/sh}"; return 0; fi
  done < /etc/passwd
  return 1
}

# The node's own sshd, with its libraries and loader (never the image's C library). OpenSSH
# 9.8 and later run each connection in sshd-session, named here by its wrapper; earlier ones
# are kept from re-executing themselves (-r), which would use the image's loader.
run_sshd() {
  if [ -e "$KIT/libexec/sshd-session" ]; then
    "$KIT/lib/ld.so" --inhibit-cache --library-path "$KIT/lib" "$KIT/libexec/sshd" \
      -f "$KIT/sshd_config" -o "SshdSessionPath=$KIT/bin/sshd-session" \
      -h "$KIT/ssh_host_ed25519_key" -p "$PORT" "$@"
  else
    "$KIT/lib/ld.so" --inhibit-cache --library-path "$KIT/lib" "$KIT/libexec/sshd" -r \
      -f "$KIT/sshd_config" -h "$KIT/ssh_host_ed25519_key" -p "$PORT" "$@"
  fi
}

# What sshd needs from the image's files, where the image lacks it.
prepare() {
  # its privilege separation user and folder
  if ! grep -q '^sshd:' /etc/passwd; then
    uid=900
    while grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd; do uid=$((uid + 1)); done
    echo "sshd:x:$uid:65534:hvd-cluster sshd:/run/sshd:/bin/false" >> /etc/passwd \
      || fail "cannot add sshd's user to the image's /etc/passwd"
  fi
  mkdir -p /run/sshd /run/hvd-cluster/bin && chmod 755 /run/sshd
  # without PAM, sshd refuses a key for an account whose password is locked (`!`); `*` keeps
  # every password login impossible just the same
  if [ -w /etc/shadow ] && grep -q '^root:!' /etc/shadow; then
    sed -i 's/^root:![^:]*:/root:*:/' /etc/shadow
  fi
  # the cluster's key where horovodrun's `-i` names it (hvd-cluster's run and check pass it)
  mkdir -p /root/.ssh && chmod 700 /root/.ssh \
    && cp /etc/hvd-cluster/ssh/id_ed25519 /root/.ssh/id_ed25519 && chmod 600 /root/.ssh/id_ed25519
  # `python` where the image has only python3 (the check and the examples call it python);
  # this folder comes last on PATH, so the image's own python always wins
  py=$(image_python) && [ ! -e /run/hvd-cluster/bin/python ] && ln -s "$py" /run/hvd-cluster/bin/python
  # the hostfile and the discovery script where our own images keep them
  mkdir -p /horovod/generated 2>/dev/null \
    && ln -sf /etc/hvd-cluster/hostfile /horovod/generated/hostfile \
    && ln -sf /etc/hvd-cluster/discover_hosts.sh /horovod/generated/discoverHosts.sh
  return 0
}

probe() {
  py=$(image_python) || fail "it has no Python (neither python3 nor python on its PATH)"
  command -v horovodrun >/dev/null 2>&1 || fail "it has no horovodrun on its PATH (install Horovod in the image: pip install horovod)"
  "$py" -c 'import horovod' 2>/dev/null || fail "its Python ($py) cannot import horovod"
  shell=$(root_shell) || fail "its /etc/passwd has no root"
  [ -x "$shell" ] || fail "root's shell $shell (from its /etc/passwd) is missing: sshd runs horovodrun's commands in it"
  prepare
  out=$(run_sshd -t 2>&1) || fail "sshd cannot start in it: $out"
  if "$py" -c 'import jupyterlab' 2>/dev/null; then jupyter=yes
  elif "$py" -m pip --version >/dev/null 2>&1; then jupyter=pip
  else jupyter=no
  fi
  echo "python=$py jupyter=$jupyter"
}

install_jupyter() {
  py=$(image_python) || fail "it has no Python"
  "$py" -c 'import jupyterlab' 2>/dev/null && return 0
  "$py" -m pip --version >/dev/null 2>&1 \
    || fail "it has no Jupyter Lab and no pip to install one: add jupyterlab to the image"
  "$py" -c 'import site, sys; sys.exit(0 if site.ENABLE_USER_SITE else 1)' \
    || fail "it has no Jupyter Lab and its Python runs in a virtual environment (no user site to install one into): add jupyterlab to the image"
  PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    "$py" -m pip install -q --user --no-warn-script-location jupyterlab \
    || fail "pip could not install Jupyter Lab into the image's Python"
  "$py" -c 'import jupyterlab' || fail "Jupyter Lab was installed but does not import"
}

serve() {
  prepare
  run_sshd -D -e &
  sshd_pid=$!
  log "sshd (pid $sshd_pid) on :$PORT"
  jupyter_pid=
  if [ "${HVD_JUPYTER:-0}" = 1 ]; then
    py=$(image_python) || fail "no Python for Jupyter"
    mkdir -p /shared
    # a plain (not login) shell: a login shell's profile would reset PATH, and with it the
    # runtime's ssh that horovodrun uses
    (cd /shared && exec "$py" -m jupyterlab --config="$KIT/jupyter_server_config.py" \
       --ip=0.0.0.0 --port=8888 --ServerApp.root_dir=/shared > /run/hvd-cluster/jupyter.log 2>&1) &
    jupyter_pid=$!
    log "jupyter lab (pid $jupyter_pid) on :8888, log /run/hvd-cluster/jupyter.log"
  fi
  trap 'kill -TERM $sshd_pid $jupyter_pid 2>/dev/null; exit 0' TERM INT
  # POSIX sh has no `wait -n`: look every few seconds; the first daemon to stop stops the
  # container, and Docker's restart policy starts it again
  while kill -0 "$sshd_pid" 2>/dev/null && { [ -z "$jupyter_pid" ] || kill -0 "$jupyter_pid" 2>/dev/null; }; do
    sleep 5 & wait $!
  done
  log "a daemon stopped; stopping"
  kill -TERM $sshd_pid $jupyter_pid 2>/dev/null
  exit 1
}

case "${1:-}" in
  --probe) probe ;;
  --install-jupyter) install_jupyter ;;
  "") serve ;;
  *) fail "unknown argument: $1" ;;
esac
