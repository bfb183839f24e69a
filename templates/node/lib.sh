# hvd-cluster's node functions, put before every check and apply script (never run alone).
# Package names are those of Debian 12/13 and Ubuntu 22.04/24.04 (the same for what we need).

# The node runs a distribution whose packages we know, or stops saying what it found.
hvd_distro() {
  if [ ! -r /etc/os-release ]; then
    echo "this node has no /etc/os-release: hvd-cluster installs packages on Debian 12/13 and Ubuntu 22.04/24.04" >&2
    return 1
  fi
  # shellcheck disable=SC1091
  . /etc/os-release
  case "${ID:-}:${VERSION_ID:-}" in
    debian:12|debian:13|ubuntu:22.04|ubuntu:24.04) return 0 ;;
  esac
  echo "this node runs ${PRETTY_NAME:-an unknown system} (ID=${ID:-none} VERSION_ID=${VERSION_ID:-none}): hvd-cluster installs packages on Debian 12/13 and Ubuntu 22.04/24.04" >&2
  return 1
}

# The package lists read once per boot (again after a source changed: its marker removed);
# sets $hvd_apt, apt-get as the installs run it.
hvd_apt_update() {
  hvd_distro || return 1
  export DEBIAN_FRONTEND=noninteractive
  hvd_apt="apt-get -q -y -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
  [ ! -e /run/hvd-cluster-apt-updated ] || return 0
  # bounded retry: on a fresh Ubuntu guest the first boot's apt timers hold the lists lock
  hvd_try=1
  until $hvd_apt update >/dev/null; do
    [ "$hvd_try" -lt 4 ] || return 1
    echo "apt-get update failed (try $hvd_try of 4); again in 10 s" >&2
    hvd_try=$((hvd_try + 1)); sleep 10
  done
  touch /run/hvd-cluster-apt-updated
}

# Installs the packages that are missing, in one apt transaction, after one `apt-get update`
# per boot; waits for another apt (cloud-init's, unattended-upgrades) up to 5 minutes.
hvd_apt_install() {
  hvd_missing=""
  for hvd_p in "$@"; do
    dpkg-query -W -f='${Status}' "$hvd_p" 2>/dev/null | grep -q 'install ok installed' || hvd_missing="$hvd_missing $hvd_p"
  done
  [ -n "$hvd_missing" ] || return 0
  hvd_apt_update || return 1
  echo "installing$hvd_missing" >&2
  # shellcheck disable=SC2086
  $hvd_apt install --no-install-recommends $hvd_missing >/dev/null
}

# systemd where it is PID 1, else the SysV `service` wrapper.
hvd_systemd() { [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; }
hvd_service() {  # start|restart NAME
  if hvd_systemd; then
    systemctl enable -q "$2" 2>/dev/null || true
    systemctl "$1" "$2"
  else
    service "$2" "$1"
  fi
}

# A container (our local nodes, the test cloud's container hosts) shares its host's kernel:
# no kernel NFS of its own even where the host has it.
hvd_in_container() {
  [ -f /.dockerenv ] || [ -f /run/.containerenv ] || grep -qa 'container=' /proc/1/environ 2>/dev/null
}
hvd_kernel_nfs_server() {
  ! hvd_in_container && { grep -qw nfsd /proc/filesystems || modprobe nfsd 2>/dev/null; }
}
hvd_kernel_nfs_client() {
  ! hvd_in_container && { grep -qw nfs4 /proc/filesystems || modprobe nfsv4 2>/dev/null || modprobe nfs 2>/dev/null; }
}

# /shared from SOURCE (host:/path) with the kernel NFS client, kept in /etc/fstab across
# reboots (_netdev: after the network; nofail: a missing server does not stop the boot).
# x-systemd.before: after a reboot Docker (whose containers bind-mount /shared) starts after it
hvd_fstab_line() { printf '%s /shared nfs _netdev,nofail,hard,proto=tcp,x-systemd.before=docker.service 0 0\n' "$1"; }
hvd_mount_shared() {  # SOURCE
  mkdir -p /shared
  HVD_LINE=$(hvd_fstab_line "$1") awk '$2 != "/shared" { print } END { print ENVIRON["HVD_LINE"] }' /etc/fstab > /etc/fstab.hvd-new
  if cmp -s /etc/fstab.hvd-new /etc/fstab; then rm -f /etc/fstab.hvd-new; else
    cat /etc/fstab.hvd-new > /etc/fstab && rm -f /etc/fstab.hvd-new
    ! hvd_systemd || systemctl daemon-reload
  fi
  hvd_now=$(findmnt -n -o SOURCE --mountpoint /shared 2>/dev/null || true)
  if [ "$hvd_now" = "$1" ]; then return 0; fi
  [ -z "$hvd_now" ] || umount /shared
  mount /shared
}
# /shared is SOURCE mounted over NFS and the fstab line is there.
hvd_shared_mounted_from() {  # SOURCE
  [ "$(findmnt -n -t nfs,nfs4 -o SOURCE --mountpoint /shared 2>/dev/null)" = "$1" ] &&
    grep -qxF "$(hvd_fstab_line "$1")" /etc/fstab
}

# The runtime for a user's image (runtime.apply.sh) is made of this node's OpenSSH and the
# files whose hash is $1: a changed binary or file makes it again (and recreates the container).
hvd_runtime_stamp() {
  { sha256sum /usr/sbin/sshd "$(command -v ssh)"; echo "$1"; } | sha256sum | cut -c1-16
}
