set -e
{% if role == "master" %}
# A userspace NFS server (nfs-ganesha): it needs no kernel NFS support on the node.
if ! command -v ganesha.nfsd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get install -y -q nfs-ganesha nfs-ganesha-vfs libnfs-utils
fi
mkdir -p /shared
chmod 1777 /shared
if command -v hvd-nfs-export >/dev/null; then
  hvd-nfs-export /shared {{ clients | shell_quote }}
else
  echo "this node has no hvd-nfs-export helper; install the hvd-cluster node tools" >&2; exit 1
fi
echo {{ master | shell_quote }} > /shared/.hvd-cluster-master
{% else %}
mkdir -p /shared
if ! test -f /shared/.hvd-cluster-master; then
  if grep -qw nfs4 /proc/filesystems || modprobe nfs 2>/dev/null; then
    mount -t nfs4 -o vers=4.0,proto=tcp {{ master_ip | shell_quote }}:/shared /shared
  else
    echo "this node's kernel has no NFS client and /shared is not shared with the master" >&2; exit 1
  fi
fi
test -f /shared/.hvd-cluster-master
{% endif %}
