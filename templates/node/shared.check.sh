# /shared is served (master) or mounted (worker, Manila) as shared.apply.sh leaves it.
test -s {{ node_dir }}/shared-mode || exit 1
{% if storage == "manila" %}
hvd_shared_mounted_from {{ export | shell_quote }}
{% elif role == "master" %}
test -f /shared/.hvd-cluster-master || exit 1
{% if volume_serial %}
# /shared is the volume's file system (a disk whose serial is the volume's)
[ "$(cat {{ node_dir }}/shared-volume 2>/dev/null)" = {{ volume_serial | shell_quote }} ] || exit 1
src=$(findmnt -n -o SOURCE --mountpoint /shared 2>/dev/null) || exit 1
ls -l /dev/disk/by-id/ 2>/dev/null | grep -F -- {{ volume_serial | shell_quote }} | grep -v -- -part | grep -q "/$(basename "$src")\$" || exit 1
{% endif %}
if hvd_kernel_nfs_server; then
  grep -qxF "/shared "{{ clients | shell_quote }}"(rw,sync,no_subtree_check,no_root_squash)" /etc/exports.d/hvd-cluster.exports &&
    exportfs -s | grep -q '^/shared ' && ss -Htln 'sport = :2049' | grep -q .
else
  pgrep -x ganesha.nfsd >/dev/null && ss -Htln 'sport = :2049' | grep -q . &&
    grep -qF "Clients = "{{ clients | shell_quote }}";" /etc/ganesha/ganesha.conf
fi
{% else %}
if hvd_kernel_nfs_client; then hvd_shared_mounted_from {{ master_ip | ip }}:/shared || exit 1; fi
test -f /shared/.hvd-cluster-master
{% endif %}
