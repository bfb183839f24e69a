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
