"""Routing, NAT and security groups for the test cloud's libvirt guests (no L2/L3 agents).

Neutron 2026.1 has no Linux-bridge agent and the test cloud runs no OVS/OVN: fakebind binds the
ports of the libvirt host as Linux-bridge ports (bridge brq<network id[:11]>, tap tap<port
id[:11]>; os-vif makes the bridge, libvirt plugs the tap). Every INTERVAL seconds (doubling up
to IDLE_INTERVAL while neither what it makes of Neutron nor this machine's bridges and taps
change: each look is five listings of every project's resources) this agent reads Neutron (as
admin) and makes this machine what the L3 agent and the security-group firewall would make:

- the bridge of every network with a port on the libvirt host (made if os-vif has not yet);
- each router interface's address on its network's bridge (the guests' default gateway); a
  network without a router gets its subnet's gateway address there (for DHCP only: no SNAT);
- DHCP and DNS as Neutron's DHCP agent gives them: one dnsmasq per bridge (a child of this
  agent) with a static lease per port (MAC -> fixed IP, hostname), the router, the MTU and as
  DNS servers the subnet's dns_nameservers or else itself (forwarding to this machine's
  resolver). Nova's config drive says `ipv4_dhcp` for subnets with DHCP enabled, and
  cloud-init then runs DHCP on the interface;
- SNAT: a router's subnets leave through this machine: to the external network (the bridge
  of `public`) with the router's external address (kept on that bridge as a /32), to anything
  else through this machine's uplink with its address (masquerade; package mirrors, DNS);
- floating IPs: DNAT floating IP -> fixed IP (prerouting and output: this machine and the
  external network reach it) and SNAT fixed IP -> floating IP towards the external network,
  while associated; a /32 route of the floating IP onto the guest's bridge, so that proxy ARP
  answers for it on the external bridge;
- security groups per port, in the inet table: a chain per port, reached by (bridge, fixed IP)
  from the forward hook (routed traffic, floating IPs, and guest-to-guest traffic on a bridge:
  br_netfilter, net.bridge.bridge-nf-call-iptables = 1, passes bridged IPv4 through the inet
  hooks, with conntrack; this kernel has no conntrack in the bridge family) and from the output
  hook (what this machine sends to a guest). Default deny ingress, established/related allowed
  (stateful), ARP allowed, IPv6 to a filtered port dropped (a bridge-family table), ingress rules of
  ethertype IPv4 (protocol, port range or ICMP type/code, remote CIDR or remote group = the
  fixed IPs of every port in that group), re-made when rules or membership change, removed with
  the port. Ports with port_security_enabled=false are not filtered. Egress rules are not
  enforced (egress is open, as with Neutron's default group), nor is anti-spoofing.

All state is in the nftables tables `inet hvd_cloud` and `bridge hvd_cloud` (each replaced in
one transaction when it changes), routes of protocol ROUTE_PROTO and addresses on brq* bridges;
tests/cloud/stop removes it all.

usage: hvd-cloud-net-agent --cloud local-admin --host vmhost --public-network public
           --public-bridge hvd-public --uplink eth0
"""
import argparse
import hashlib
import ipaddress
import json
import os
import signal
import subprocess
import time

import openstack

from hvd_dockervirt.pace import next_interval

TABLE = "hvd_cloud"
ROUTE_PROTO = "78"   # the agent's routes (start's own are 77)


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def run(*args, stdin=None):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def bridge_name(network_id):
    return ("brq" + network_id)[:14]


def tap_name(port_id):
    return ("tap" + port_id)[:14]


def chain_name(port_id):
    return "port-" + port_id[:11]


def ipv4s(port):
    return [ip["ip_address"] for ip in port.get("fixed_ips") or []
            if ipaddress.ip_address(ip["ip_address"]).version == 4]


class State:
    """What Neutron says the libvirt host's networking should be."""

    def __init__(self, conn, host, public_net_id):
        ports = [p.to_dict() for p in conn.network.ports()]
        subnets = {s.id: s for s in conn.network.subnets(ip_version=4)}
        routers = {r.id: r for r in conn.network.routers()}
        fips = list(conn.network.ips())
        sgs = {g.id: g for g in conn.network.security_groups()}
        self.vm_ports = [p for p in ports if p.get("binding_host_id") == host]
        nets = {p["network_id"] for p in self.vm_ports}
        self.bridges = {bridge_name(n): n for n in nets}
        # router interfaces on those networks: gateway addresses on the bridges, SNAT
        self.addresses = {b: set() for b in self.bridges}     # bridge -> {"10.0.0.1/24"}
        self.dhcp = {}    # bridge -> [(subnet, server address)] of subnets with DHCP enabled
        self.snat = []    # (cidr, bridge, router external address or None)
        for p in ports:
            if p.get("device_owner") not in ("network:router_interface",
                                             "network:router_interface_distributed"):
                continue
            if p["network_id"] not in nets:
                continue
            router = routers.get(p["device_id"])
            ext = None
            if router and router.external_gateway_info:
                for ip in router.external_gateway_info.get("external_fixed_ips") or []:
                    if ipaddress.ip_address(ip["ip_address"]).version == 4:
                        ext = ip["ip_address"]
            for ip in p.get("fixed_ips") or []:
                sub = subnets.get(ip["subnet_id"])
                if not sub:
                    continue
                prefix = ipaddress.ip_network(sub.cidr).prefixlen
                b = bridge_name(p["network_id"])
                self.addresses[b].add(f"{ip['ip_address']}/{prefix}")
                self.snat.append((sub.cidr, b, ext))
        # networks without a router interface: the subnet's gateway address serves DHCP
        for sub in subnets.values():
            b = bridge_name(sub.network_id)
            if b not in self.bridges:
                continue
            prefix = ipaddress.ip_network(sub.cidr).prefixlen
            mine = [a for a in self.addresses[b]
                    if ipaddress.ip_interface(a).network == ipaddress.ip_network(sub.cidr)]
            if not mine and sub.gateway_ip:
                mine = [f"{sub.gateway_ip}/{prefix}"]
                self.addresses[b].add(mine[0])
            if sub.is_dhcp_enabled and mine:
                self.dhcp.setdefault(b, []).append((sub, mine[0].split("/")[0]))
        self.leases = {}   # bridge -> ["mac,ip,hostname"]
        for p in ports:
            b = bridge_name(p["network_id"])
            if b in self.dhcp and p.get("mac_address"):
                for ip in ipv4s(p):
                    name = (p.get("dns_name") or "host-" + ip.replace(".", "-"))
                    self.leases.setdefault(b, []).append(f"{p['mac_address']},{ip},{name}")
        # external addresses of routers with an interface here: kept on the public bridge
        self.router_ext = sorted({e for _, _, e in self.snat if e})
        # floating IPs of guests
        by_id = self.ports_by_id = {p["id"]: p for p in self.vm_ports}
        self.fips = []    # (floating ip, fixed ip, bridge)
        for f in fips:
            p = by_id.get(f.port_id) if f.port_id else None
            if p and f.floating_network_id == public_net_id and f.fixed_ip_address:
                self.fips.append((f.floating_ip_address, f.fixed_ip_address,
                                  bridge_name(p["network_id"])))
        self.fips.sort()
        # security groups: members of every group (for remote-group rules), per VM port rules
        members = {}
        for p in ports:
            for g in p.get("security_group_ids") or []:
                members.setdefault(g, set()).update(ipv4s(p))
        self.port_rules = {}    # port id -> None (not filtered) or [nft rule text]
        for p in sorted(self.vm_ports, key=lambda p: p["id"]):
            if p.get("is_port_security_enabled") is False:
                self.port_rules[p["id"]] = None
                continue
            rules = []
            for g in sorted(p.get("security_group_ids") or []):
                sg = sgs.get(g)
                for r in sorted((sg.security_group_rules if sg else None) or [],
                                key=lambda r: r["id"]):
                    rule = nft_rule(r, members)
                    if rule:
                        rules.append(rule)
            self.port_rules[p["id"]] = rules
        # what this host should be, to tell a look that saw a change from one that did not:
        # only what the agent makes from Neutron, not all of Neutron (the API-bound tests' churn
        # of fake-driver servers in other projects kept it at its fast pace, half of
        # neutron-api's requests in a run)
        self.said = json.dumps(
            [self.vm_ports, self.bridges, {b: sorted(a) for b, a in self.addresses.items()},
             {b: [(sub.to_dict(), ip) for sub, ip in v] for b, v in self.dhcp.items()},
             self.leases, self.snat, self.router_ext, self.fips, self.port_rules],
            sort_keys=True, default=str)


def nft_rule(r, members):
    """An nftables rule for one ingress IPv4 Neutron rule; None if it admits nothing here."""
    if r.get("direction") != "ingress" or r.get("ethertype") != "IPv4":
        return None
    m = []
    if r.get("remote_ip_prefix"):
        net = ipaddress.ip_network(r["remote_ip_prefix"], strict=False)
        if net.version != 4:
            return None
        if net.prefixlen:
            m.append(f"ip saddr {net}")
    elif r.get("remote_group_id"):
        ips = sorted(members.get(r["remote_group_id"], ()), key=ipaddress.ip_address)
        if not ips:
            return None
        m.append("ip saddr { " + ", ".join(ips) + " }")
    elif r.get("remote_address_group_id"):
        return None   # address groups: not supported here
    proto = r.get("protocol")
    lo, hi = r.get("port_range_min"), r.get("port_range_max")
    names = {"6": "tcp", "17": "udp", "1": "icmp", "132": "sctp"}
    proto = names.get(str(proto), proto)
    if proto in (None, "any", "0"):
        pass
    elif proto in ("tcp", "udp", "sctp", "udplite", "dccp"):
        if lo is None:
            m.append(f"meta l4proto {proto}")
        else:
            ports = str(lo) if hi in (None, lo) else f"{lo}-{hi}"
            m.append(f"{proto} dport {ports}")
    elif proto in ("icmp", "ipv6-icmp") and proto == "icmp":
        m.append("meta l4proto icmp")
        if lo is not None:
            m.append(f"icmp type {lo}")
            if hi is not None:
                m.append(f"icmp code {hi}")
    else:
        try:
            m.append(f"ip protocol {int(proto)}")
        except ValueError:
            m.append(f"ip protocol {proto}")
    return " ".join(m + ["accept"]) if m else "accept"


def inet_table(s, public_bridge, uplink):
    lines = [f"table inet {TABLE} {{"]
    filtered = {p: r for p, r in s.port_rules.items() if r is not None}
    for p, rules in sorted(filtered.items()):
        lines.append(f"  chain {chain_name(p)} {{")
        lines.append("    ct state established,related accept")
        lines.append("    ct state invalid drop")
        lines.append("    udp sport 67 udp dport 68 accept   # DHCP replies (as Neutron allows)")
        for r in rules:
            lines.append(f"    {r}")
        lines.append("    drop")
        lines.append("  }")
    keys = []
    for p in sorted(filtered):
        port = s.ports_by_id[p]
        for ip in ipv4s(port):
            keys.append(f'"{bridge_name(port["network_id"])}" . {ip} : jump {chain_name(p)}')
    for hook in ("forward", "output"):
        lines.append(f"  chain sg-{hook} {{ type filter hook {hook} priority filter; policy accept;")
        if keys:
            lines.append(f"    oifname . ip daddr vmap {{ {', '.join(keys)} }}")
        lines.append("  }")
    lines.append("  chain prerouting { type nat hook prerouting priority dstnat; policy accept;")
    for fip, fixed, _ in s.fips:
        lines.append(f"    ip daddr {fip} dnat ip to {fixed}")
    lines.append("  }")
    lines.append("  chain output { type nat hook output priority -100; policy accept;")
    for fip, fixed, _ in s.fips:
        lines.append(f"    ip daddr {fip} dnat ip to {fixed}")
    lines.append("  }")
    lines.append("  chain postrouting { type nat hook postrouting priority srcnat; policy accept;")
    for fip, fixed, bridge in s.fips:
        lines.append(f'    ip saddr {fixed} oifname "{public_bridge}" snat ip to {fip}')
    for cidr, bridge, ext in s.snat:
        if ext:
            lines.append(f'    ip saddr {cidr} oifname "{public_bridge}" snat ip to {ext}')
            lines.append(f'    ip saddr {cidr} oifname "{uplink}" masquerade')
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def bridge_table(s):
    """IPv6 into a filtered port: dropped (the rules here are IPv4 only)."""
    lines = [f"table bridge {TABLE} {{"]
    taps = sorted(tap_name(p) for p, r in s.port_rules.items() if r is not None)
    for hook in ("forward", "output"):
        lines.append(f"  chain {hook}-ports {{ type filter hook {hook} priority 0; policy accept;")
        if taps:
            lines.append(f"    oifname {{ {', '.join(f'{t!r}'.replace(chr(39), chr(34)) for t in taps)} }} "
                         "ether type ip6 drop")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


class Dhcp:
    """One dnsmasq per bridge: static DHCP leases of the network's ports, DNS forwarding."""

    def __init__(self, state_dir, resolver):
        self.dir = state_dir
        self.resolver = resolver
        self.procs = {}    # bridge -> (Popen, args)
        os.makedirs(state_dir, exist_ok=True)

    def sync(self, s):
        for b in list(self.procs):
            if b not in s.dhcp:
                self.stop(b)
        for b, subs in s.dhcp.items():
            hosts = os.path.join(self.dir, f"{b}.hosts")
            text = "\n".join(sorted(s.leases.get(b, []))) + "\n"
            changed = not os.path.exists(hosts) or open(hosts).read() != text
            if changed:
                with open(hosts + ".tmp", "w") as f:
                    f.write(text)
                os.replace(hosts + ".tmp", hosts)
            args = ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts",
                    "--no-resolv", f"--server={self.resolver}", "--bind-interfaces",
                    f"--interface={b}", "--except-interface=lo", "--dhcp-authoritative",
                    f"--dhcp-hostsfile={hosts}", f"--dhcp-leasefile={self.dir}/{b}.leases",
                    f"--pid-file={self.dir}/{b}.pid", "--log-facility=-", "--quiet-dhcp"]
            for i, (sub, server) in enumerate(subs):
                net = ipaddress.ip_network(sub.cidr)
                tag = f"s{i}"
                args.append(f"--dhcp-range=set:{tag},{net.network_address},static,"
                            f"{net.netmask},86400s")
                if sub.gateway_ip:
                    args.append(f"--dhcp-option=tag:{tag},option:router,{sub.gateway_ip}")
                dns = sub.dns_nameservers or [server]
                args.append(f"--dhcp-option=tag:{tag},option:dns-server,{','.join(dns)}")
                mtu = self.mtu(b)
                if mtu:
                    args.append(f"--dhcp-option=tag:{tag},option:mtu,{mtu}")
            old = self.procs.get(b)
            if old and old[0].poll() is None and old[1] == args:
                if changed:
                    old[0].send_signal(signal.SIGHUP)   # re-reads the hosts file
                continue
            if old:
                self.stop(b)
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL)
            self.procs[b] = (p, args)
            log(f"dnsmasq on {b} (pid {p.pid}): {len(s.leases.get(b, []))} lease(s), "
                f"subnets {[sub.cidr for sub, _ in subs]}")

    @staticmethod
    def mtu(b):
        try:
            with open(f"/sys/class/net/{b}/mtu") as f:
                return int(f.read())
        except OSError:
            return None

    def stop(self, b):
        p, _ = self.procs.pop(b)
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log(f"dnsmasq on {b} stopped")


class Agent:
    def __init__(self, a):
        self.a = a
        self.dhcp = Dhcp(a.state_dir, a.resolver)
        self.conn = openstack.connect(cloud=a.cloud)
        self.public_id = self.conn.network.find_network(a.public_network, ignore_missing=False).id
        self.applied = {}    # what was last written: table text per family

    def apply_table(self, family, text):
        if self.applied.get(family) == text:
            return False
        exists = subprocess.run(["nft", "list", "table", family, TABLE],
                                capture_output=True).returncode == 0
        run("nft", "-f", "-", stdin=(f"delete table {family} {TABLE}\n" if exists else "") + text)
        self.applied[family] = text
        return True

    def sync(self):
        """Makes this machine's networking match Neutron's; returns what it saw of both."""
        s = State(self.conn, self.a.host, self.public_id)
        links = {l["ifname"]: l for l in json.loads(run("ip", "-j", "addr", "show"))}
        # what this agent acts on: its bridges, the guests' taps, the public bridge and the
        # uplink; not the veths every local cluster's container adds and removes (seen in the
        # fingerprint, they kept the agent at its fast pace while nothing of ours changed)
        seen = (s.said, sorted(n for n in links if n.startswith(("brq", "tap"))
                               or n in (self.a.public_bridge, self.a.uplink)))
        # bridges (os-vif makes them too; ours are the same: no IPv6, up)
        for b in s.bridges:
            if b not in links:
                run("ip", "link", "add", b, "type", "bridge")
                try:
                    with open(f"/proc/sys/net/ipv6/conf/{b}/disable_ipv6", "w") as f:
                        f.write("1")
                except OSError:
                    pass
                log(f"bridge {b} made (network {s.bridges[b]})")
            if b not in links or "UP" not in links[b].get("flags", []):
                run("ip", "link", "set", b, "up")
        links = {l["ifname"]: l for l in json.loads(run("ip", "-j", "addr", "show"))}
        # gateway addresses on the bridges (every IPv4 address on a brq bridge is ours)
        for name, l in links.items():
            if not name.startswith("brq"):
                continue
            have = {f"{a['local']}/{a['prefixlen']}" for a in l.get("addr_info", [])
                    if a.get("family") == "inet"}
            want = s.addresses.get(name, set())
            for a in sorted(have - want):
                run("ip", "addr", "del", a, "dev", name)
                log(f"{a} removed from {name}")
            for a in sorted(want - have):
                run("ip", "addr", "add", a, "dev", name)
                log(f"{a} (router interface) on {name}")
            if name not in s.bridges and not want:
                # no port of the network left on this host: the bridge goes (no tap left in it)
                members = json.loads(run("ip", "-j", "link", "show", "master", name))
                if not members:
                    run("ip", "link", "del", name)
                    log(f"bridge {name} removed")
        # routers' external addresses on the public bridge (/32: replies to their SNAT)
        pub = links.get(self.a.public_bridge, {})
        have = {a["local"] for a in pub.get("addr_info", [])
                if a.get("family") == "inet" and a.get("prefixlen") == 32}
        for a in sorted(have - set(s.router_ext)):
            run("ip", "addr", "del", f"{a}/32", "dev", self.a.public_bridge)
            log(f"router address {a} removed from {self.a.public_bridge}")
        for a in sorted(set(s.router_ext) - have):
            run("ip", "addr", "add", f"{a}/32", "dev", self.a.public_bridge)
            log(f"router address {a} on {self.a.public_bridge}")
        # floating IPs: /32 routes onto the guest's bridge, source = this machine's public address
        routes = json.loads(run("ip", "-j", "route", "show", "proto", ROUTE_PROTO))
        have = {(r["dst"], r.get("dev")) for r in routes}
        want = {(fip, b) for fip, _, b in s.fips if b in links or b in s.bridges}
        for dst, dev in sorted(have - want):
            run("ip", "route", "del", dst, "dev", dev, "proto", ROUTE_PROTO)
        for dst, dev in sorted(want - have):
            run("ip", "route", "replace", dst, "dev", dev, "src", self.a.public_gateway,
                "proto", ROUTE_PROTO)
        self.dhcp.sync(s)
        if self.apply_table("inet", inet_table(s, self.a.public_bridge, self.a.uplink)):
            log(f"nat: {len(s.fips)} floating ip(s) {[f[0] for f in s.fips]}, "
                f"{len(s.snat)} routed subnet(s)")
        if self.apply_table("bridge", bridge_table(s)):
            log("security groups: " + (", ".join(
                f"{tap_name(p)} {'open' if r is None else f'{len(r)} rule(s)'}"
                for p, r in sorted(s.port_rules.items())) or "no port"))
        return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cloud", default="local-admin", help="clouds.yaml entry (an admin)")
    ap.add_argument("--host", default="vmhost", help="the libvirt compute host (binding:host_id)")
    ap.add_argument("--public-network", default="public", help="Neutron external network")
    ap.add_argument("--public-bridge", default="hvd-public", help="its bridge on this machine")
    ap.add_argument("--public-gateway", default="203.0.113.1",
                    help="this machine's address on the public bridge")
    ap.add_argument("--uplink", required=True, help="this machine's default-route interface")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between looks")
    ap.add_argument("--idle-interval", type=float, default=8.0,
                    help="the longest pause, reached while nothing changes")
    ap.add_argument("--state-dir", required=True, help="dnsmasq hosts, leases, pid files")
    ap.add_argument("--resolver", required=True,
                    help="DNS server the guests' dnsmasq forwards to (this machine's)")
    a = ap.parse_args()
    agent = Agent(a)
    log(f"watching ports of host {a.host}; external network {a.public_network} "
        f"on {a.public_bridge}, uplink {a.uplink}")
    last_error, last_seen, interval = None, None, a.interval
    while True:
        try:
            seen = agent.sync()
            # the fast pace after a change, doubling to --idle-interval while none (each look
            # costs Neutron five listings of every project's resources)
            interval = next_interval(interval, a.interval, a.idle_interval, seen != last_seen)
            last_seen, last_error = seen, None
        except Exception as e:   # Neutron restarting, a port going away meanwhile, ...
            if str(e) != last_error:
                log(f"error (retrying): {e}")
            last_error, interval = str(e), a.interval
            agent.applied.clear()   # re-apply everything next time
        time.sleep(interval)


if __name__ == "__main__":
    main()
