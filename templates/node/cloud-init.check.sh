# cloud-init has finished (or this node has none): bootstrap's apt runs must not race it.
# Exit 2 from newer cloud-init means done with warnings.
if command -v cloud-init >/dev/null && { [ -e /run/cloud-init ] || [ -e /var/lib/cloud/seed/nocloud/user-data ] || [ -e /var/lib/cloud/instance ]; }; then
  rc=0; timeout 600 cloud-init status --wait >/dev/null || rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then cloud-init status --long >&2; exit 1; fi
fi
exit 0
