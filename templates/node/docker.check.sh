# Docker engine present and answering, zstd for the image's transfer; where the kernel enforces
# AppArmor, its parser is there.
docker info >/dev/null 2>&1 || exit 1
command -v zstd >/dev/null || exit 1
hvd_in_container || [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" != Y ] || command -v apparmor_parser >/dev/null
