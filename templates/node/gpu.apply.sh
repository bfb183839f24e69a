# NVIDIA driver (Debian non-free) and the NVIDIA container toolkit, then Docker's runtime.
set -e
export DEBIAN_FRONTEND=noninteractive
. /etc/os-release
if ! nvidia-smi -L >/dev/null 2>&1; then
  sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true
  apt-get update -q
  apt-get install -y -q "linux-headers-$(uname -r)" nvidia-driver firmware-misc-nonfree
  modprobe nvidia || { echo "the NVIDIA driver is installed but does not load: reboot the node and run up again" >&2; exit 1; }
fi
if ! command -v nvidia-ctk >/dev/null; then
  apt-get install -y -q nvidia-container-toolkit || {
    echo "nvidia-container-toolkit is not in this node's package sources; add NVIDIA's repository for ${ID} ${VERSION_ID}" >&2; exit 1; }
fi
nvidia-ctk runtime configure --runtime=docker
systemctl restart docker 2>/dev/null || service docker restart
