# cloud-init has finished (or this node has none): bootstrap's apt runs must not race it.
# Exit 2 from newer cloud-init means done with warnings. `status --wait` itself can fail
# while cloud-init moves from one boot stage to the next (Debian 12's 22.4 reads status.json
# as the next stage replaces it: FileNotFoundError, exit 1, seen on a node just started), so
# a failure is asked again; cloud-init's own error fails each time, and is shown.
if command -v cloud-init >/dev/null && { [ -e /run/cloud-init ] || [ -e /var/lib/cloud/seed/nocloud/user-data ] || [ -e /var/lib/cloud/instance ]; }; then
  for _ in 1 2 3; do
    rc=0; timeout 600 cloud-init status --wait >/dev/null 2>&1 || rc=$?
    if [ "$rc" = 0 ] || [ "$rc" = 2 ]; then exit 0; fi
    sleep 2
  done
  cloud-init status --long >&2; exit 1
fi
exit 0
