# Docker's data and /var/tmp on this node's data disk (the flavor's ephemeral disk, ours once
# labelled hvd-data): the disk mounted, and both bound from it.
dev=$(blkid -L hvd-data 2>/dev/null) || exit 1
[ "$(findmnt -n -o SOURCE /var/lib/hvd-cluster/data)" = "$dev" ] || exit 1
case "$(findmnt -n -o SOURCE /var/lib/docker)" in "$dev[/docker]") ;; *) exit 1 ;; esac
case "$(findmnt -n -o SOURCE /var/tmp)" in "$dev[/tmp]") ;; *) exit 1 ;; esac
