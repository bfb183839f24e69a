# The flavor's ephemeral disk ({{ ephemeral_gb }} GB) becomes this node's data disk: formatted
# once (label hvd-data), mounted, with Docker's data (/var/lib/docker) and /var/tmp (where the
# image is kept while it is fanned out, and a remote build's root) bound from it. The disk and
# Docker's bind are in /etc/fstab for the next boot; /var/tmp's bind is not: at a boot with a
# blank disk (after `start`: a shelved server comes back with a blank ephemeral disk) a failed
# /var/tmp mount fails basic.target and every service with a private /var/tmp (logind,
# resolved: no DNS), so this step binds it again at each bootstrap. Run before Docker is
# installed, so its data lands there from the start; after `start` Docker is stopped while the
# new disk takes its place. A node booted from a bake (`hvd-cluster bake`) has Docker's data,
# the Horovod image in it, on its root disk: a blank data disk bound over it would hide it, so it
# is copied onto the disk first (and again onto the blank disk after a `start`); the root disk's
# copy stays for that.
set -e
data=/var/lib/hvd-cluster/data
dev=$(blkid -L hvd-data 2>/dev/null || true)
if [ -z "$dev" ]; then
  # Nova formats the ephemeral disk (ext4 or vfat) labelled ephemeral0; other clouds leave it
  # blank: the whole disk of exactly its size, with no partition, and no filesystem or that one.
  dev=$(blkid -L ephemeral0 2>/dev/null || true)
  if [ -z "$dev" ]; then
    want=$(( {{ ephemeral_gb }} * 1024 * 1024 * 1024 ))
    for d in $(lsblk -d -n -b -o NAME,SIZE,TYPE | awk -v w="$want" '$3 == "disk" && $2 == w { print $1 }'); do
      [ "$(lsblk -n -o NAME "/dev/$d" | wc -l)" = 1 ] || continue
      fs=$(blkid -o value -s TYPE "/dev/$d" || true)
      label=$(blkid -o value -s LABEL "/dev/$d" | tr '[:upper:]' '[:lower:]' || true)
      if [ -z "$fs" ] || [ "$label" = ephemeral0 ]; then dev=/dev/$d; break; fi
    done
  fi
  if [ -z "$dev" ]; then
    echo "no disk of {{ ephemeral_gb }} GB (the flavor's ephemeral disk) on this node; its disks: $(lsblk -d -n -o NAME,SIZE,FSTYPE,MOUNTPOINT | tr '\n' ';')" >&2
    exit 1
  fi
  # cloud-init mounts an ephemeral disk on /mnt: unmounted, and its line out of /etc/fstab
  for target in $(findmnt -r -n -o TARGET -S "$dev"); do
    umount "$target"
    awk -v t="$target" '$2 != t' /etc/fstab > /etc/fstab.hvd-new
    cat /etc/fstab.hvd-new > /etc/fstab; rm -f /etc/fstab.hvd-new
  done
  mkfs.ext4 -q -F -m 0 -L hvd-data "$dev"
  echo "hvd-note: Docker's data and /var/tmp are on the flavor's {{ ephemeral_gb }} GB ephemeral disk ($dev)"
fi
# nofail: a boot without the disk (a blank one after `start`) goes on after a short wait for
# it, Docker on the root disk until this step makes the disk again. (A /var/tmp line of an
# earlier version goes.)
awk '$2 != "/var/lib/hvd-cluster/data" && $2 != "/var/lib/docker" && $2 != "/var/tmp"' /etc/fstab > /etc/fstab.hvd-new
cat >> /etc/fstab.hvd-new <<FSTAB
LABEL=hvd-data $data ext4 defaults,nofail,x-systemd.device-timeout=30s,x-systemd.before=docker.service 0 2
$data/docker /var/lib/docker none bind,nofail,x-systemd.requires-mounts-for=$data,x-systemd.before=docker.service 0 0
FSTAB
cmp -s /etc/fstab.hvd-new /etc/fstab || cat /etc/fstab.hvd-new > /etc/fstab
rm -f /etc/fstab.hvd-new
restart=""
if hvd_systemd && systemctl is-active -q docker; then
  restart=1
  systemctl stop docker.socket docker.service
fi
mkdir -p "$data"
mountpoint -q "$data" || mount "$data"
mkdir -p "$data/docker" /var/lib/docker
install -d -m 1777 "$data/tmp"
if [ -e /etc/hvd-cluster-bake ] && ! mountpoint -q /var/lib/docker \
  && [ -d /var/lib/docker/image ] && [ -z "$(ls -A "$data/docker")" ]; then
  cp -a /var/lib/docker/. "$data/docker/"
  echo "hvd-note: Docker's data from the bake ($(du -sh "$data/docker" | cut -f1)) copied from the root disk onto the ephemeral disk"
fi
mountpoint -q /var/lib/docker || mount /var/lib/docker
mountpoint -q /var/tmp || mount --bind "$data/tmp" /var/tmp
if hvd_systemd; then systemctl daemon-reload; fi
[ -z "$restart" ] || systemctl start docker.service
