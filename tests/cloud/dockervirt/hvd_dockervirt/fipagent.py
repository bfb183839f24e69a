"""Floating IPs for the test cloud's node containers (the cloud has no L3 agent).

Every second (every 8 s at most while nothing changes: each look costs Neutron ~35 ms of
CPU, ~3% of a test run when both agents polled at full rate) it asks Neutron (as admin) for
the floating IPs of the external network: each one
associated with a port whose device (the server) runs as a node container gets that container
connected to the Docker network standing for the external network, at the floating IP
(`docker network connect --ip`); when the association ends, or the floating IP is deleted, the
container is disconnected. This machine holds the external subnet's gateway address on that
network, so it reaches every floating IP directly.

Unlike Neutron's L3 agent there is no NAT: the node sees its floating IP on a second interface.
Security groups are not enforced.

usage: hvd-cloud-fip-agent --cloud local-admin --network public --docker-network hvd-public
"""
import argparse
import time

import openstack

from hvd_dockervirt.docker import INSTANCE_LABEL, container_name, docker, ids, inspect
from hvd_dockervirt.pace import next_interval


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def wanted(conn, net_id):
    """container name -> floating IP, for every association Neutron has."""
    want = {}
    for fip in conn.network.ips(floating_network_id=net_id):
        device = (fip.port_details or {}).get("device_id") if fip.port_id else None
        if device:
            want[container_name(device)] = fip.floating_ip_address
    return want


def connected(docker_net):
    """container name -> its address on DOCKER_NET (None: not connected), per node container."""
    have = {}
    for c in inspect("container", *ids("container", f"label={INSTANCE_LABEL}")):
        ep = c["NetworkSettings"]["Networks"].get(docker_net) or {}
        have[c["Name"].lstrip("/")] = (ep.get("IPAMConfig") or {}).get("IPv4Address")
    return have


def sync(conn, net_id, docker_net):
    """Makes Docker's network match Neutron's associations; returns what it saw of both."""
    want, have = wanted(conn, net_id), connected(docker_net)
    seen = (sorted(want.items()), sorted(have.items(), key=str))
    # disconnect first: a floating IP moved from one server to another is free again
    for name, ip in have.items():
        if ip and want.get(name) != ip:
            docker("network", "disconnect", "--force", docker_net, name)
            log(f"{ip} disconnected from {name}")
    for name, ip in want.items():
        if name in have and have[name] != ip:
            docker("network", "connect", "--ip", ip, docker_net, name)
            log(f"{ip} connected to {name}")
    return seen



def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cloud", default="local-admin", help="clouds.yaml entry (an admin)")
    ap.add_argument("--network", default="public", help="Neutron external network")
    ap.add_argument("--docker-network", default="hvd-public")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between looks")
    ap.add_argument("--idle-interval", type=float, default=8.0,
                    help="the longest pause, reached while nothing changes")
    a = ap.parse_args()
    conn = openstack.connect(cloud=a.cloud)
    net_id = conn.network.find_network(a.network, ignore_missing=False).id
    log(f"watching floating IPs of {a.network} ({net_id}) -> Docker network {a.docker_network}")
    last_error, last_seen, interval = None, None, a.interval
    while True:
        try:
            seen = sync(conn, net_id, a.docker_network)
            interval = next_interval(interval, a.interval, a.idle_interval, seen != last_seen)
            last_seen, last_error = seen, None
        except Exception as e:   # Neutron restarting, a container going away meanwhile, ...
            if str(e) != last_error:   # once per distinct error, not every second
                log(f"error (retrying): {e}")
            last_error, interval = str(e), a.interval
        time.sleep(interval)


if __name__ == "__main__":
    main()
