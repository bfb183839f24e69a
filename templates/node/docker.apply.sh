# Debian's own engine; a cloud image may not have it yet.
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q docker.io
systemctl enable --now docker 2>/dev/null || service docker start
for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && exit 0; sleep 1; done
echo "the Docker engine did not answer within 60s" >&2; exit 1
