#!/bin/sh
# hvd-nfs-export PATH CLIENTS : export PATH over NFSv4 (TCP 2049) to CLIENTS (e.g. 10.77.0.0/24)
# with nfs-ganesha's VFS FSAL, in userspace (no kernel NFS server needed). Idempotent.
# PATH: best a volume (ext4 here); the VFS FSAL also served a path on the fuse-overlayfs root.
set -eu
EXPORT_PATH=${1:?usage: hvd-nfs-export PATH CLIENTS}
CLIENTS=${2:?usage: hvd-nfs-export PATH CLIENTS}
CONF=/etc/ganesha/ganesha.conf
mkdir -p "$EXPORT_PATH" /var/run/ganesha /var/lib/nfs/ganesha
sed -e "s|@EXPORT_PATH@|$EXPORT_PATH|g" -e "s|@CLIENTS@|$CLIENTS|g" /etc/hvd-cluster/ganesha.conf.tmpl > "$CONF.new"
if [ -f /var/run/ganesha/ganesha.pid ] && kill -0 "$(cat /var/run/ganesha/ganesha.pid)" 2>/dev/null; then
    if cmp -s "$CONF.new" "$CONF"; then rm -f "$CONF.new"; echo "nfs-ganesha already exports $EXPORT_PATH"; exit 0; fi
    kill "$(cat /var/run/ganesha/ganesha.pid)"; sleep 1
fi
mv "$CONF.new" "$CONF"
ganesha.nfsd -f "$CONF" -L /var/log/ganesha/ganesha.log -p /var/run/ganesha/ganesha.pid -N NIV_EVENT
for _ in $(seq 1 50); do
    if ss -Htln 'sport = :2049' | grep -q .; then echo "nfs-ganesha exports $EXPORT_PATH to $CLIENTS on :2049"; exit 0; fi
    sleep 0.2
done
echo "nfs-ganesha did not listen on :2049; see /var/log/ganesha/ganesha.log" >&2
tail -n 20 /var/log/ganesha/ganesha.log >&2 || true
exit 1
