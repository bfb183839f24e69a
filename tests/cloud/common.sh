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
)
ALL_PORTS="3306 4369 5672 25672 11211 5000 8778 9292 9696 8774 8786 8776"

# Services in start order; those without a port are checked by pid only.
SERVICES="mariadb epmd rabbitmq memcached keystone placement glance
  neutron-api neutron-rpc-server neutron-periodic-workers
  nova-api nova-conductor nova-scheduler nova-compute
  manila-api manila-scheduler manila-share"
[ "$ENABLE_CINDER" = 1 ] && SERVICES="$SERVICES cinder-api cinder-scheduler cinder-volume"

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
# pgroup_alive PGID: true while any process of the group exists.
pgroup_alive() { kill -0 -- "-$1" 2>/dev/null; }

# have_docker: true if a Docker engine answers (no engine: every server stays fake).
have_docker() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }
# docker_cleanup: remove every container, volume and network labelled hvd-cloud=1 and the host
# routes start added. Idempotent.
docker_cleanup() {
  ip route flush proto $ROUTE_PROTO 2>/dev/null || true
  have_docker || return 0
  local c v n rc=0
  c=$(docker ps -aq --filter label=hvd-cloud=1)
  [ -z "$c" ] || docker rm --force $c >/dev/null || rc=1
  v=$(docker volume ls -q --filter label=hvd-cloud=1)
  [ -z "$v" ] || docker volume rm $v >/dev/null || rc=1
  n=$(docker network ls -q --filter label=hvd-cloud=1)
  [ -z "$n" ] || docker network rm $n >/dev/null || rc=1
  [ -z "$c$v$n" ] || echo "docker: removed $(echo $c | wc -w) container(s), $(echo $v | wc -w)" \
    "volume(s), $(echo $n | wc -w) network(s) labelled hvd-cloud=1"
  return $rc
}
