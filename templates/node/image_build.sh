# container.source = "build-remote": builds the profile's Horovod image on this node (the
# master) from the recipe hvd-cluster ships (the same files and script `up` runs on the user's
# machine for "build"), so a few kilobytes cross the user's link instead of the image. The build
# is idempotent (every image carries a hash of its inputs), so a second `up` takes seconds.
# Prints the image's id last (`image_id=...`), and `built=1` when something was built.
set -e -o pipefail
# debootstrap makes the Debian base image from the mirror this node's apt sources name
hvd_apt_install debootstrap ca-certificates
recipe={{ recipe_dir | shell_quote }}
rm -rf "$recipe.new"
{% for f in files %}install -d "$(dirname "$recipe.new/"{{ f.path | shell_quote }})"
printf '%s' {{ f.base64 | shell_quote }} | base64 -d > "$recipe.new/"{{ f.path | shell_quote }}
chmod {{ f.mode }} "$recipe.new/"{{ f.path | shell_quote }}
{% endfor %}rm -rf "$recipe"
mv "$recipe.new" "$recipe"
# Only the variant switches of this image; the mirror is this node's own (its apt sources).
unset MIRROR SECURITY_MIRROR HVD_CLUSTER_APT_MIRROR HOROVOD_WITH_MPI HVD_WITH_TORCH HVD_WITH_TF HVD_CUDA
{% for e in env %}export {{ e.name }}={{ e.value | shell_quote }}
{% endfor %}export LOG_DIR={{ log_dir | shell_quote }}
# debootstrap makes device files in the base's root and runs programs there: not under a nodev
# or noexec /var/tmp (hardened images mount it so; a container node's root is nodev), then in
# Docker's own data folder, which allows both wherever Docker runs.
export ROOTFS_PARENT=/var/tmp
if findmnt -n -o OPTIONS -T /var/tmp | tr , '\n' | grep -qxE 'nodev|noexec'; then
  ROOTFS_PARENT=/var/lib/docker/hvd-cluster-tmp
  mkdir -p "$ROOTFS_PARENT"
fi
log="$LOG_DIR/build-remote.out"
mkdir -p "$LOG_DIR"
# stdin is this script: the build must not read it
bash "$recipe/scripts/build-images" base horovod < /dev/null | tee "$log"
if grep -q '\] horovod.*: built ' "$log"; then echo built=1; fi
echo "image_id=$(docker image inspect -f '{{ "{{" }}.Id}}' {{ image | shell_quote }})"
