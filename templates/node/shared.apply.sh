# /shared by what the node's kernel can do. Kernel NFS (a VM): the master's nfs-kernel-server
# exports it to the cluster's subnet, the workers mount it, kept in /etc/fstab. No kernel NFS
# (a container node: the local provider, the test cloud's container hosts): STAND-IN, nfs-ganesha
# in userspace on the master and, on the workers, the one Docker volume the nodes share.
# Manila: every node mounts the share's export location with the kernel client.
set -e
mkdir -p /shared {{ node_dir }}
{% if storage == "manila" %}
if ! hvd_kernel_nfs_client; then
  echo "this node's kernel has no NFS client: the Manila share cannot be mounted" >&2; exit 1
fi
hvd_apt_install nfs-common
hvd_mount_shared {{ export | shell_quote }}
echo kernel-nfs > {{ node_dir }}/shared-mode
{% elif role == "master" %}
{% if volume_serial %}
# /shared on its own Cinder volume (storage.volume_gb), attached to the master: found by its
# disk's serial (the volume id's first 20 characters), formatted only when it holds no file
# system (a kept or reused volume keeps its files), mounted by UUID before the export.
serial={{ volume_serial | shell_quote }}
dev=""
for _ in $(seq 1 90); do
  for link in /dev/disk/by-id/*"$serial"*; do
    case "$link" in *-part*) continue ;; esac
    [ -e "$link" ] && { dev=$(readlink -f "$link"); break 2; }
  done
  sleep 1
done
if [ -z "$dev" ]; then
  echo "/shared's volume (serial $serial) is not a disk of this node after 90 s; its disks: $(lsblk -d -n -o NAME,SIZE,SERIAL | tr '\n' ';')" >&2
  exit 1
fi
if [ -z "$(blkid -o value -s TYPE "$dev" || true)" ]; then
  mkfs.ext4 -q -m 0 -L hvd-shared "$dev"
  echo "hvd-note: /shared's volume ($dev) formatted (ext4): it held no file system"
fi
uuid=$(blkid -o value -s UUID "$dev")
[ -n "$uuid" ] || { echo "/shared's volume ($dev) has a file system without a UUID" >&2; exit 1; }
awk '$2 != "/shared"' /etc/fstab > /etc/fstab.hvd-new
echo "UUID=$uuid /shared auto defaults,nofail,x-systemd.device-timeout=60s 0 2" >> /etc/fstab.hvd-new
cmp -s /etc/fstab.hvd-new /etc/fstab || cat /etc/fstab.hvd-new > /etc/fstab
rm -f /etc/fstab.hvd-new
if hvd_systemd; then systemctl daemon-reload; fi
if [ "$(findmnt -n -o SOURCE --mountpoint /shared 2>/dev/null)" != "$dev" ]; then
  mountpoint -q /shared && umount /shared
  mount /shared
fi
echo "$serial" > {{ node_dir }}/shared-volume
{% endif %}
chmod 1777 /shared
if hvd_kernel_nfs_server; then
  hvd_apt_install nfs-kernel-server
  mkdir -p /etc/exports.d
  printf '/shared %s(rw,sync,no_subtree_check,no_root_squash)\n' {{ clients | shell_quote }} > /etc/exports.d/hvd-cluster.exports
  # Debian and Ubuntu: nfs-server.service (nfs-kernel-server is its alias and the SysV name)
  if hvd_systemd; then systemctl enable -q nfs-server; systemctl restart nfs-server; else service nfs-kernel-server restart; fi
  exportfs -ra
  echo kernel-nfs > {{ node_dir }}/shared-mode
else
  # STAND-IN for kernels without NFS: nfs-ganesha, installed here (not the node image's helper).
  hvd_apt_install nfs-ganesha nfs-ganesha-vfs
  mkdir -p /etc/ganesha /var/run/ganesha /var/lib/nfs/ganesha /var/log/ganesha
  cat > /etc/ganesha/ganesha.conf.hvd-new <<'HVD_GANESHA_EOF'
{{ ganesha_conf }}HVD_GANESHA_EOF
  pidfile=/var/run/ganesha/ganesha.pid
  running=0
  if [ -f $pidfile ] && kill -0 "$(cat $pidfile)" 2>/dev/null; then running=1; fi
  if [ $running = 1 ] && cmp -s /etc/ganesha/ganesha.conf.hvd-new /etc/ganesha/ganesha.conf; then
    rm -f /etc/ganesha/ganesha.conf.hvd-new
  else
    [ $running = 0 ] || { kill "$(cat $pidfile)"; sleep 1; }
    mv /etc/ganesha/ganesha.conf.hvd-new /etc/ganesha/ganesha.conf
    if hvd_systemd; then systemctl restart nfs-ganesha
    else ganesha.nfsd -f /etc/ganesha/ganesha.conf -L /var/log/ganesha/ganesha.log -p $pidfile -N NIV_EVENT; fi
  fi
  for _ in $(seq 1 50); do ss -Htln 'sport = :2049' | grep -q . && break; sleep 0.2; done
  ss -Htln 'sport = :2049' | grep -q . || { echo "nfs-ganesha does not listen on :2049" >&2; tail -n 20 /var/log/ganesha/ganesha.log >&2 || true; exit 1; }
  echo stand-in > {{ node_dir }}/shared-mode
fi
echo {{ master | shell_quote }} > /shared/.hvd-cluster-master
{% else %}
if hvd_kernel_nfs_client; then
  hvd_apt_install nfs-common
  hvd_mount_shared {{ master_ip | ip }}:/shared
  echo kernel-nfs > {{ node_dir }}/shared-mode
elif test -f /shared/.hvd-cluster-master; then
  # STAND-IN: a container node on the same Docker volume as the master.
  echo stand-in > {{ node_dir }}/shared-mode
else
  echo "this node's kernel has no NFS client and /shared is not shared with the master" >&2; exit 1
fi
test -f /shared/.hvd-cluster-master
{% endif %}
