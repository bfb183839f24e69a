#!/bin/sh
# hvd-cluster bake, on the node a bake is made from (run as root).
#
#   bake.sh prepare BAKE_NAME IMAGE_ID   before the snapshot
#   bake.sh restore                      after it (also run by itself after 90 minutes, in case
#                                        the command that began the bake never comes back)
#
# It runs from /run/hvd-bake/bake.sh, on the tmpfs mounted there (by the caller, which unmounts
# it at the end): a container's /run is no tmpfs, and a snapshot must not see what is set aside.
# prepare sets aside, on a tmpfs of its own (never on a disk a snapshot reads), everything that
# belongs to this cluster or to this boot: the cluster's files and keys, the login keys, the
# SSH host keys (a server booted from the bake makes its own), the machine id, cloud-init's
# instance state and instance data (under /run, which is no tmpfs in a container), the jobs,
# the autostop agent and its credential, the object store's credential, known_hosts, shell
# histories, Docker logins and the logs; and what makes a node the master of this cluster
# (/shared's export, /shared's line in /etc/fstab naming this cluster's volume), so that a
# worker may boot from a master's bake. A small file set aside is overwritten with zeros where
# it was before it goes (a snapshot of a disk reads freed blocks too), and the root file
# system's free blocks are discarded where its disk allows it. It removes the cluster's
# containers (made again by the next `up`) and the image's kept archive (a cache).
# restore puts everything back as it was. A node that cannot be baked whole (/shared or staged
# data on the disk the snapshot reads, or Docker's data on an ephemeral disk it does not) is
# refused before anything moves: exit 3, one line.
set -eu
umask 077
here=/run/hvd-bake
aside=$here/aside
marker=/etc/hvd-cluster-bake
# what goes aside; globs are expanded on the node
set_aside='/etc/hvd-cluster /var/lib/hvd-cluster/jobs /var/lib/hvd-cluster/autostop
/var/lib/hvd-cluster/objects /opt/hvd-cluster /var/lib/cloud /run/cloud-init /var/log/hvd-cluster
/var/log/journal /var/log/cloud-init.log /var/log/cloud-init-output.log
/etc/ssh/ssh_host_* /root/.ssh /root/.docker /root/.bash_history /root/.python_history
/home/*/.ssh/authorized_keys /home/*/.ssh/known_hosts /home/*/.bash_history
/home/*/.python_history /home/*/.docker /etc/systemd/system/hvd-cluster-*
/etc/exports.d/hvd-cluster.exports /etc/ganesha/ganesha.conf'

# logs a running program keeps open: copied aside and emptied in place, joined again after
emptied='/var/log/dockerd.log'

has_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

# Not empty and on the same file system as / (so in the snapshot).
on_root_disk_with_files() {
  [ -d "$1" ] || return 1
  [ -n "$(ls -A "$1" 2>/dev/null)" ] || return 1
  [ "$(stat -c %d "$1")" = "$(stat -c %d /)" ]
}

restore() {
  [ -d "$aside" ] || { echo "nothing set aside"; return 0; }
  if [ -f "$aside/list" ]; then
    while IFS= read -r p; do
      [ -e "$aside/files$p" ] || [ -L "$aside/files$p" ] || continue
      rm -rf "$p"
      mkdir -p "$(dirname "$p")"
      mv "$aside/files$p" "$p"
    done < "$aside/list"
  fi
  for f in $emptied; do
    [ -f "$aside/logs$f" ] || continue
    cat "$f" >> "$aside/logs$f" 2>/dev/null || true
    cat "$aside/logs$f" > "$f"
  done
  if [ -f "$aside/machine-id" ]; then
    cat "$aside/machine-id" > /etc/machine-id
  fi
  if [ -f "$aside/fstab" ]; then
    cat "$aside/fstab" > /etc/fstab
  fi
  rm -f "$marker"
  if has_systemd; then
    systemctl daemon-reload || true
    journalctl --flush >/dev/null 2>&1 || true
    systemctl stop hvd-bake-restore.timer >/dev/null 2>&1 || true
  fi
  [ -f "$aside/watchdog.pid" ] && kill -- "-$(cat "$aside/watchdog.pid")" 2>/dev/null || true
  rm -rf "$aside"
  echo "restored"
}

prepare() {
  name=$1 image_id=$2
  # a bake cut short before: put that one back first
  restore >/dev/null
  if [ -e /shared ] && ! mountpoint -q /shared && on_root_disk_with_files /shared; then
    echo "/shared is on this node's root disk and holds files: they would go into the bake" >&2
    exit 3
  fi
  if mountpoint -q /var/lib/hvd-cluster/data \
    && [ "$(stat -c %d /var/lib/docker)" = "$(stat -c %d /var/lib/hvd-cluster/data)" ]; then
    echo "Docker's data (the image) is on the flavor's ephemeral disk, which a snapshot of the root disk leaves out" >&2
    exit 3
  fi
  if on_root_disk_with_files /var/lib/hvd-cluster/data/staged; then
    echo "staged data is on this node's root disk: it would go into the bake" >&2
    exit 3
  fi
  mountpoint -q "$here" || { echo "$here is not a tmpfs of its own" >&2; exit 3; }
  # The tmpfs grows to what goes aside (a node's journal alone can be hundreds of MB), within
  # half the memory the node has free: a bake must not push the node into its OOM killer.
  # shellcheck disable=SC2086
  need_kb=$(du -sck $set_aside $emptied 2>/dev/null | tail -n 1 | cut -f1)
  free_kb=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo)
  if [ -n "$free_kb" ] && [ $((need_kb * 2)) -gt "$free_kb" ]; then
    echo "what a bake sets aside ($((need_kb / 1024)) MB, the logs most of it) is more than half this node's free memory ($((free_kb / 1024)) MB), where it is kept during the snapshot; rotate the node's logs (journalctl --vacuum-size) or free memory" >&2
    exit 3
  fi
  mount -o remount,size=$((need_kb + 65536))k "$here"
  mkdir -p "$aside"
  # the safety net: everything comes back even if nobody says so
  if has_systemd; then
    systemd-run --quiet --unit hvd-bake-restore --on-active=90min /bin/sh "$here/bake.sh" restore
  else
    # a session of its own, so that restore ends the sleep with its shell
    setsid sh -c "sleep 5400; exec /bin/sh $here/bake.sh restore" >/dev/null 2>&1 < /dev/null &
    echo $! > "$aside/watchdog.pid"
  fi
  # the cluster's containers and the image's kept archive
  if command -v docker >/dev/null 2>&1; then
    ids=$(docker ps -aq --filter label=hvd-cluster.config)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null
  fi
  rm -f /var/tmp/hvd-cluster-image.tar*
  if has_systemd; then
    journalctl --relinquish-var >/dev/null 2>&1 || true
  fi
  : > "$aside/list"
  for p in $set_aside; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    mkdir -p "$aside/files$(dirname "$p")"
    # keys and credentials are small: zeroed in place first, where the snapshot would read
    # their freed blocks (logs, large, are moved as they are)
    cp -a "$p" "$aside/files$p"
    find "$p" -xdev -type f -size -1024k -exec shred -n 0 -z {} + 2>/dev/null || true
    rm -rf "$p"
    printf '%s\n' "$p" >> "$aside/list"
  done
  # /shared's line names this cluster's volume (the master's): out while the disk is read
  if awk '$2 == "/shared" { found = 1 } END { exit !found }' /etc/fstab 2>/dev/null; then
    cat /etc/fstab > "$aside/fstab"
    awk '$2 != "/shared"' "$aside/fstab" > /etc/fstab
  fi
  for f in $emptied; do
    [ -f "$f" ] || continue
    mkdir -p "$aside/logs$(dirname "$f")"
    cat "$f" > "$aside/logs$f"
    : > "$f"
  done
  if [ -s /etc/machine-id ]; then
    cat /etc/machine-id > "$aside/machine-id"
    : > /etc/machine-id
  fi
  # what a node booted from the bake finds (no secret: a name and the image's id)
  umask 022
  printf 'bake=%s\nimage=%s\n' "$name" "$image_id" > "$marker"
  sync
  # Blocks freed earlier (a file the bootstrap rewrote, the removed containers' layers) still
  # hold what was there; where the disk takes discards the snapshot reads zeros instead.
  trimmed="freed blocks not discarded (the root disk takes no discard)"
  if command -v fstrim >/dev/null 2>&1 && fstrim / >/dev/null 2>&1; then
    trimmed="freed blocks discarded"
  fi
  echo "set aside $(wc -l < "$aside/list") path(s); $trimmed"
}

case ${1:-} in
  prepare) prepare "$2" "$3" ;;
  restore) restore ;;
  *) echo "usage: bake.sh prepare NAME IMAGE_ID | restore" >&2; exit 2 ;;
esac
