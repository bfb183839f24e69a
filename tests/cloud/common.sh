# Shared settings for tests/cloud/{install,start,stop,status,smoke}. Sourced, not run.
# Everything listens on 127.0.0.1 only; nothing here is a secret (throw-away test cloud).

CLOUD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The venv is a machine cache outside the work tree: CI clones the repo fresh, the venv stays.
HVD_CLOUD_HOME=${HVD_CLOUD_HOME:-/opt/hvd-cluster-cloud}
VENV=$HVD_CLOUD_HOME/venv
STATE=$CLOUD_DIR/state
CONF=$STATE/etc
LOGS=$STATE/log
PIDS=$STATE/pids

HOST_IP=127.0.0.1
PW=secret
REGION=RegionOne
KEYSTONE_URL=http://$HOST_IP:5000/v3
DB_URL=mysql+pymysql://openstack:$PW@$HOST_IP:3306
RABBIT_URL=rabbit://guest:guest@$HOST_IP:5672/
MEMCACHE=$HOST_IP:11211
ENABLE_CINDER=${ENABLE_CINDER:-1}

# Ports the cloud owns; start refuses to run if one is taken, stop checks they are free again.
declare -A SERVICE_PORT=(
  [mariadb]=3306 [epmd]=4369 [rabbitmq]=5672 [memcached]=11211
  [keystone]=5000 [placement]=8778 [glance]=9292 [neutron-api]=9696
  [nova-api]=8774 [manila-api]=8786 [cinder-api]=8776
  [swift-proxy]=8080 [swift-object]=6200 [swift-container]=6201 [swift-account]=6202
)
ALL_PORTS="3306 4369 5672 25672 11211 5000 8778 9292 9696 8774 8786 8776 8080 6200 6201 6202"

# Services in start order; those without a port are checked by pid only.
SERVICES="mariadb epmd rabbitmq memcached keystone placement glance
  neutron-api neutron-rpc-server neutron-periodic-workers
  nova-api nova-conductor nova-scheduler nova-compute
  manila-api manila-scheduler manila-share
  swift-account swift-container swift-object swift-proxy"
[ "$ENABLE_CINDER" = 1 ] && SERVICES="$SERVICES cinder-api cinder-scheduler cinder-volume"

# Virtual machines: a second nova-compute (host $VM_HOST) runs Nova's own libvirt driver under
# qemu TCG for servers of the image debian-12-generic (build-vm-image). ENABLE_VM=0 leaves it
# out; the default (auto) runs it when libvirtd and libvirt-python are installed.
VM_HOST=vmhost
VM_TRAIT=CUSTOM_HVD_VM       # only servers whose image requires it land on $VM_HOST
NET_TABLE=hvd_cloud          # nftables (net agent): table inet (NAT, security groups), table bridge (IPv6 drop)
BRIDGE_PREFIX=brq            # + 11 characters of the Neutron network id (fakebind)
ENABLE_VM=${ENABLE_VM:-auto}
if [ "$ENABLE_VM" = auto ]; then
  ENABLE_VM=0
  [ -x /usr/sbin/libvirtd ] && [ -n "$(ls "$VENV"/lib/python3*/site-packages/libvirt.py 2>/dev/null)" ] && ENABLE_VM=1
fi
[ "$ENABLE_VM" = 1 ] && SERVICES="$SERVICES virtlogd libvirtd nova-compute-vm"

# Volumes the libvirt guests boot from: a one-node Ceph cluster (Debian's ceph-mon, ceph-mgr,
# ceph-osd; BlueStore on a sparse file in the state folder, no kernel module) behind Cinder's
# RBD driver, as the volume type `ceph`; qemu reads the volumes with its own librbd. Volumes of
# the type `standard` stay on the fake backend (the fake-driver and Docker servers read no disk).
# ENABLE_CEPH=0 leaves it out; the default (auto) runs it with the VM host and Cinder when
# Ceph's packages are installed.
CEPH_MON_PORT=6789
ENABLE_CEPH=${ENABLE_CEPH:-auto}
if [ "$ENABLE_CEPH" = auto ]; then
  ENABLE_CEPH=0
  [ "$ENABLE_VM" = 1 ] && [ "$ENABLE_CINDER" = 1 ] && [ -x /usr/bin/ceph-osd ] && [ -x /usr/bin/ceph-mgr ] &&
    [ -n "$(ls "$VENV"/lib/python3*/site-packages/rbd*.so 2>/dev/null)" ] && ENABLE_CEPH=1
fi
if [ "$ENABLE_CEPH" = 1 ]; then
  SERVICES="$SERVICES ceph-mon ceph-mgr ceph-osd"
  SERVICE_PORT[ceph-mon]=$CEPH_MON_PORT
  ALL_PORTS="$ALL_PORTS $CEPH_MON_PORT"
fi

# Real hosts (dockervirt): servers of images with the property hvd_docker_image run as Docker
# containers; the external network `public` is the Docker network $PUBLIC_NET, on which this
# machine is the gateway and the floating-IP agent connects containers at their floating IPs.
PUBLIC_CIDR=203.0.113.0/24   # = the seeded public-subnet (seed.py)
PUBLIC_GATEWAY=203.0.113.1
PUBLIC_NET=hvd-public        # Docker network and its bridge interface
# Hosts this machine must keep reaching while the cloud runs: an address of theirs inside
# PUBLIC_CIDR (here the egress proxy for package mirrors sits at 203.0.113.80) keeps a /32 route
# via the uplink and is left out of Neutron's floating-IP pool.
EGRESS_NAMES="deb.debian.org security.debian.org pypi.org files.pythonhosted.org index.crates.io static.crates.io"
ROUTE_PROTO=77               # marks the host routes start adds (a number no routing daemon uses)

# Daemons from Debian live in sbin; the OpenStack tools in the venv.
export PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# listener_pid PORT: pid of the process listening on 127.0.0.1/any PORT, empty if none.
listener_pid() {
  { ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; } || true
}
# port_open PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/$HOST_IP/$1") 2>/dev/null; }
# port_ours SERVICE PORT: true if PORT has a listener and it belongs to SERVICE's process group
# (a listener of another cloud, say a second checkout's start racing this one, is not ours: its
# ceph-mon would answer our OSD with "wrong fsid").
port_ours() {
  local pid pgid
  pid=$(listener_pid "$2"); [ -n "$pid" ] || return 1
  pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')
  [ -n "$pgid" ] && [ "$pgid" = "$(cat "$PIDS/$1.pid" 2>/dev/null)" ]
}
# pgroup_alive PGID: true while any process of the group exists.
pgroup_alive() { kill -0 -- "-$1" 2>/dev/null; }

# have_docker: true if a Docker engine answers (no engine: every server stays fake).
have_docker() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }
# vm_cleanup: destroy and undefine every libvirt domain of Nova (instance-*), end qemu processes
# libvirt left (by their pid files), remove the bridges (brq*), the nftables tables and the
# DOCKER-USER rules of the VM networking. Idempotent; libvirtd may or may not run.
vm_cleanup() {
  local d f p n=0
  if command -v virsh >/dev/null && [ -S /run/libvirt/libvirt-sock ] && virsh -c qemu:///system version >/dev/null 2>&1; then
    for d in $(virsh -c qemu:///system list --all --name 2>/dev/null | grep '^instance-' || true); do
      virsh -c qemu:///system destroy "$d" >/dev/null 2>&1 || true
      virsh -c qemu:///system undefine --nvram "$d" >/dev/null 2>&1 ||
        virsh -c qemu:///system undefine "$d" >/dev/null 2>&1 || true
      n=$((n + 1))
    done
  fi
  for f in /run/libvirt/qemu/instance-*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f" 2>/dev/null || true)
    if [[ $p =~ ^[0-9]+$ ]] && grep -qa 'guest=instance-' "/proc/$p/cmdline" 2>/dev/null; then
      kill -KILL "$p" 2>/dev/null || true; n=$((n + 1))
    fi
    rm -f "$f"
  done
  for d in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep "^$BRIDGE_PREFIX" || true); do
    ip link del "$d" 2>/dev/null || true
  done
  ip route flush proto 78 2>/dev/null || true   # the net agent's floating-IP routes
  for d in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^hvd-src-' || true); do
    ip netns del "$d" 2>/dev/null || true         # tests/cloud/public-source namespaces
  done
  nft delete table inet $NET_TABLE 2>/dev/null || true
  nft delete table bridge $NET_TABLE 2>/dev/null || true
  while iptables -D DOCKER-USER -i "$BRIDGE_PREFIX+" -j ACCEPT 2>/dev/null; do :; done
  while iptables -D DOCKER-USER -o "$BRIDGE_PREFIX+" -j ACCEPT 2>/dev/null; do :; done
  [ $n = 0 ] || echo "vm: removed $n libvirt domain(s)/qemu process(es)"
  return 0
}

# docker_cleanup: remove every container, volume and network labelled hvd-cloud=1 and the host
# routes start added. Idempotent.
docker_cleanup() {
  ip route flush proto $ROUTE_PROTO 2>/dev/null || true
  have_docker || return 0
  local c v n i rc=0
  c=$(docker ps -aq --filter label=hvd-cloud=1)
  [ -z "$c" ] || docker rm --force $c >/dev/null || rc=1
  v=$(docker volume ls -q --filter label=hvd-cloud=1)
  [ -z "$v" ] || docker volume rm $v >/dev/null || rc=1
  n=$(docker network ls -q --filter label=hvd-cloud=1)
  [ -z "$n" ] || docker network rm $n >/dev/null || rc=1
  # the servers' snapshots (tests/cloud/dockervirt: `hvd-cluster bake` on the real hosts)
  i=$(docker images -q --filter label=hvd-cloud.snapshot | sort -u)
  [ -z "$i" ] || docker rmi --force $i >/dev/null || rc=1
  [ -z "$c$v$n" ] || echo "docker: removed $(echo $c | wc -w) container(s), $(echo $v | wc -w)" \
    "volume(s), $(echo $n | wc -w) network(s) labelled hvd-cloud=1"
  return $rc
}
