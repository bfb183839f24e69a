# The Docker engine from the distribution, with AppArmor's parser (a kernel with AppArmor on,
# as Debian's and Ubuntu's are, makes `docker run` fail without it), and in the same apt
# transaction what /shared and the image transfer need on this node: under emulation every
# transaction costs minutes.
set -e
pkgs="docker.io apparmor zstd"
{% if storage == "master-nfs" and role == "master" %}if hvd_kernel_nfs_server; then pkgs="$pkgs nfs-kernel-server"; fi
{% elif storage != "none" %}if hvd_kernel_nfs_client; then pkgs="$pkgs nfs-common"; fi
{% endif %}# shellcheck disable=SC2086
hvd_apt_install $pkgs
hvd_service start docker
for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && exit 0; sleep 1; done
echo "the Docker engine did not answer within 60s" >&2; exit 1
