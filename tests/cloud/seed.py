"""Seed the local test cloud through its public APIs, like a small science cloud.

Run by tests/cloud/start with the cloud's venv python:
  seed.py identity    service project + users, roles, catalog, projects/users "demo" and "api"
  seed.py resources   flavors, images, external network, quotas, share and volume types;
                      waits until Manila/Cinder schedulers know a backend pool;
                      writes state/seed.json (names and ids of what was made)
One process per phase: importing openstacksdk costs more than the API calls.
"""
import ipaddress
import json
import os
import sys
import time

import openstack

HOST = "127.0.0.1"
PASSWORD = "secret"
AUTH_URL = f"http://{HOST}:5000/v3"
REGION = "RegionOne"
CINDER = os.environ.get("ENABLE_CINDER", "1") == "1"
# Cinder's second backend, Ceph's RBD (the volumes the libvirt guests boot from; common.sh)
CEPH = CINDER and os.environ.get("ENABLE_CEPH", "0") == "1"
STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state")

MANILA_MV = "2.65"  # any microversion >= 2.46 has share type is_default etc.

# service type -> (service name, URL); all interfaces share one URL on this single node
CATALOG = {
    "compute": ("nova", f"http://{HOST}:8774/v2.1"),
    "placement": ("placement", f"http://{HOST}:8778"),
    "image": ("glance", f"http://{HOST}:9292"),
    "network": ("neutron", f"http://{HOST}:9696"),
    # Manila 22 serves only /v2 (/v1 answers 404); since microversion 2.60 without a
    # project id in the URL. Both names clients look up point there.
    "sharev2": ("manilav2", f"http://{HOST}:8786/v2"),
    "shared-file-system": ("manila", f"http://{HOST}:8786/v2"),
}
# Swift where both this machine and the cloud's servers reach it, as a real cloud's public
# endpoint is: the public network's gateway (start forwards it to 127.0.0.1:8080).
OBJECT_STORE_HOST = os.environ.get("HVD_CLOUD_OBJECT_STORE_HOST", HOST)
CATALOG["object-store"] = ("swift", f"http://{OBJECT_STORE_HOST}:8080/v1/AUTH_%(project_id)s")
if CINDER:
    CATALOG["block-storage"] = ("cinder", f"http://{HOST}:8776/v3")
    CATALOG["volumev3"] = ("cinderv3", f"http://{HOST}:8776/v3/%(project_id)s")

# The tenants tests act as (project and user of the same name): demo, then api.
TENANTS = ["demo", "api"]
SERVICE_USERS = ["nova", "neutron", "placement", "glance", "manila", "swift"] + (["cinder"] if CINDER else [])

# name: (id, vcpus, ram MiB, disk GB, extra specs)
FLAVORS = {
    # A 1 GB root disk: on real hosts the node's room for Docker is exactly that (the compute
    # driver gives small root disks their size), where the space check refuses our image.
    "m1.tiny": ("1", 1, 2048, 1, {}),
    "m1.small": ("2", 1, 2048, 20, {}),
    "m1.medium": ("3", 2, 4096, 40, {}),
    # GPU-like: custom-namespace keys are accepted by nova's extra-spec validation and
    # ignored by the default scheduler filters, so the fake driver still schedules it.
    "g1.a100": ("10", 8, 65536, 100, {"gpu:model": "nvidia-a100", "gpu:count": "1"}),
    # for servers of VM_IMAGE (libvirt guests under emulation: each vCPU is a host thread).
    # 4 GiB: 2 GiB left both guests under 100 MB free while they loaded the image (the
    # load took as long at 4 GiB, see docs/notes/suite-time.md; the room costs nothing here)
    "v1.vm": ("20", 2, 4096, 10, {}),
    # No root disk, as many clouds now sell (the Sovereign Cloud Stack's standard flavors):
    # since Stein, Nova refuses an image-backed server on it; only volume-backed servers boot.
    "m1.nodisk": ("4", 1, 2048, 0, {}),
    # v1.vm with no root disk and an ephemeral disk (the guest's second disk, formatted by
    # Nova as ephemeral0), as GPU flavors of diskless clouds have: its servers boot from a
    # volume (type ceph on the VM host), and hvd-cluster keeps Docker's data on the ephemeral.
    "v1.vm.eph": ("21", 2, 4096, 0, {}),
}
# flavor: its ephemeral disk (GB)
EPHEMERAL = {"v1.vm.eph": 10}
IMAGE = "debian-12-genericcloud-amd64"
# Servers of this image are real hosts: the compute driver (dockervirt) runs them as containers
# of the Docker image named by hvd_docker_image.
NODE_IMAGE = "hvd-node-bookworm"
NODE_IMAGE_PROPS = {"hvd_docker_image": "hvd-cluster/node:bookworm", "os_admin_user": "debian",
                    "os_distro": "debian"}
# Servers of this image are libvirt guests (qemu TCG) on the compute host VM_HOST: a Debian 12
# root filesystem (build-vm-image) with its kernel and initrd as aki/ari images beside it. The
# image requires the trait VM_TRAIT, which only VM_HOST has; VM_HOST is in an aggregate that
# requires it (isolated aggregate filtering), so nothing else lands there.
VM_IMAGE = "debian-12-generic"
VM_IMAGE_DIR = os.environ.get("HVD_CLOUD_VM_IMAGE_DIR", "")
VM_HOST = os.environ.get("HVD_CLOUD_VM_HOST", "vmhost")
VM_TRAIT = os.environ.get("HVD_CLOUD_VM_TRAIT", "CUSTOM_HVD_VM")
VM_AGGREGATE = "hvd-vm"
# this machine's resolver: what guests get as DNS server (see README)
DNS = os.environ.get("HVD_CLOUD_DNS", "")
# Addresses of the public subnet this machine reaches through its uplink (start finds them):
# never handed out as floating IPs.
RESERVED_IPS = os.environ.get("HVD_CLOUD_RESERVED_IPS", "").split()

# Room for 40 servers of any flavor above, with their networking and storage.
COMPUTE_QUOTA = dict(instances=100, cores=1000, ram=4 * 1024 * 1024, key_pairs=100,
                     server_groups=50, server_group_members=100, metadata_items=128)
NETWORK_QUOTA = dict(networks=100, subnets=100, ports=500, routers=50, floating_ips=100,
                     security_groups=100, security_group_rules=1000)
SHARE_QUOTA = dict(shares=100, gigabytes=10000, snapshots=100, snapshot_gigabytes=10000,
                   share_networks=50)
VOLUME_QUOTA = dict(volumes=100, gigabytes=10000, snapshots=100)


def log(msg):
    print(f"seed: {msg}", flush=True)


def identity():
    # System scope: keystone's own policy allows user/project management there in every mode.
    c = openstack.connect(auth_url=AUTH_URL, username="admin", password=PASSWORD,
                          user_domain_name="Default", system_scope="all", region_name=REGION)
    roles = {r.name: r for r in c.identity.roles()}
    for name in ("admin", "member", "reader", "service"):
        if name not in roles:
            roles[name] = c.identity.create_role(name=name)
    service_p = c.identity.create_project(name="service", domain_id="default",
                                          description="OpenStack service users")
    demo_p = c.identity.create_project(name="demo", domain_id="default",
                                       description="the tenant tests act as")
    demo_u = c.identity.create_user(name="demo", password=PASSWORD, domain_id="default",
                                    default_project_id=demo_p.id, email="demo@example.org")
    c.identity.assign_project_role_to_user(demo_p, demo_u, roles["member"])
    # A second tenant for the tests bound to the API alone (cloud_cli, flaky_cloud,
    # openstack_live): they lower their project's quota and count what it holds, so with a
    # project of their own they can run beside the tests of demo's clusters.
    for name in TENANTS[1:]:
        p = c.identity.create_project(name=name, domain_id="default",
                                      description="the tenant the API-bound tests act as")
        u = c.identity.create_user(name=name, password=PASSWORD, domain_id="default",
                                   default_project_id=p.id, email=f"{name}@example.org")
        c.identity.assign_project_role_to_user(p, u, roles["member"])
    for name in SERVICE_USERS:
        u = c.identity.create_user(name=name, password=PASSWORD, domain_id="default")
        # admin: cross-project calls; service: the 2026.1 policies' service-to-service rules
        c.identity.assign_project_role_to_user(service_p, u, roles["admin"])
        c.identity.assign_project_role_to_user(service_p, u, roles["service"])
    for stype, (name, url) in CATALOG.items():
        svc = c.identity.create_service(type=stype, name=name, enabled=True)
        for iface in ("public", "internal", "admin"):
            c.identity.create_endpoint(service_id=svc.id, interface=iface, url=url,
                                       region_id=REGION)
    log(f"projects service, {', '.join(TENANTS)}; users {', '.join(TENANTS)}, {', '.join(SERVICE_USERS)}; "
        f"catalog: {', '.join(CATALOG)}")


def wait_for_pool(fetch, what, timeout=120, want=1):
    """Block until a scheduler knows WANT backend pools: the first share/volume needs one."""
    t0 = time.monotonic()
    while True:
        pools = fetch()
        if len(pools) >= want:
            log(f"{what} pools after {time.monotonic() - t0:.1f}s: {[p['name'] for p in pools]}")
            return
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"{what}: no backend pool within {timeout}s")
        time.sleep(1)


def allocation_pools(start, end, reserved):
    """The range START-END as allocation pools that leave out the RESERVED addresses."""
    lo, hi = ipaddress.ip_address(start), ipaddress.ip_address(end)
    pools = []
    for r in sorted(ipaddress.ip_address(a) for a in reserved):
        if lo <= r <= hi:
            if lo < r:
                pools.append({"start": str(lo), "end": str(r - 1)})
            lo = r + 1
    if lo <= hi:
        pools.append({"start": str(lo), "end": str(hi)})
    return pools


def vm_image(c):
    """Kernel (aki), ramdisk (ari) and the root filesystem (qcow2) of VM_IMAGE; the aggregate."""
    def upload(name, fname, disk_format, container_format, **props):
        t0 = time.monotonic()
        with open(os.path.join(VM_IMAGE_DIR, fname), "rb") as f:
            img = c.image.create_image(name=name, disk_format=disk_format,
                                       container_format=container_format,
                                       visibility="public", data=f, **props)
        log(f"image {name} {img.id} ({os.path.getsize(f.name) >> 20} MiB, "
            f"{time.monotonic() - t0:.1f}s)")
        return img
    manifest = dict(line.strip().split("=", 1)
                    for line in open(os.path.join(VM_IMAGE_DIR, "manifest")) if "=" in line)
    kernel = upload(f"{VM_IMAGE}-kernel", "vmlinuz", "aki", "aki")
    ramdisk = upload(f"{VM_IMAGE}-initrd", "initrd.img", "ari", "ari")
    props = {"kernel_id": kernel.id, "ramdisk_id": ramdisk.id,
             # Emulation only (README, Image): no speculation to mitigate under TCG, and its
             # TSC is the host's clock, so the guest need not fall back to the emulated HPET.
             "os_command_line": "root=/dev/vda ro console=ttyS0 mitigations=off tsc=reliable",
             "os_distro": "debian", "os_version": "12", "os_admin_user": "debian",
             "os_type": "linux", "architecture": "x86_64", "hypervisor_type": "qemu",
             "hw_disk_bus": "virtio", "hw_vif_model": "virtio",
             f"trait:{VM_TRAIT}": "required",
             "hvd_build_key": manifest.get("key", ""), "hvd_kernel": manifest.get("kernel", "")}
    img = upload(VM_IMAGE, "disk.qcow2", "qcow2", "bare", min_disk=3, **props)
    agg = c.compute.create_aggregate(name=VM_AGGREGATE)
    c.compute.set_aggregate_metadata(agg, {f"trait:{VM_TRAIT}": "required"})
    c.compute.add_host_to_aggregate(agg, VM_HOST)
    log(f"aggregate {VM_AGGREGATE}: host {VM_HOST}, trait:{VM_TRAIT}=required")
    return {"name": VM_IMAGE, "id": img.id, "kernel_id": kernel.id, "ramdisk_id": ramdisk.id,
            "properties": {k: v for k, v in props.items()}, "host": VM_HOST,
            "aggregate": VM_AGGREGATE, "flavor": "v1.vm", "dns_nameserver": DNS}


def resources():
    c = openstack.connect(cloud="local-admin")
    demo = c.identity.find_project("demo", ignore_missing=False)
    seeded = {"project": {"name": "demo", "id": demo.id}}

    seeded["flavors"] = {}
    for name, (fid, vcpus, ram, disk, specs) in FLAVORS.items():
        f = c.compute.create_flavor(id=fid, name=name, vcpus=vcpus, ram=ram, disk=disk,
                                    ephemeral=EPHEMERAL.get(name, 0), is_public=True)
        if specs:
            c.compute.create_flavor_extra_specs(f, specs)
        seeded["flavors"][name] = {"id": fid, "vcpus": vcpus, "ram": ram, "disk": disk,
                                   "extra_specs": specs}
    log(f"flavors {', '.join(f'{n} (id {v[0]})' for n, v in FLAVORS.items())}")

    # A 1 MiB raw disk with just an MBR signature: small, but a real image upload.
    disk = bytearray(1024 * 1024)
    disk[510:512] = b"\x55\xaa"
    img = c.image.create_image(name=IMAGE, disk_format="raw", container_format="bare",
                               visibility="public", data=bytes(disk),
                               os_distro="debian", os_version="12", os_admin_user="debian")
    img = c.image.get_image(img.id)
    seeded["image"] = {"name": IMAGE, "id": img.id, "status": img.status,
                       "properties": {"os_distro": "debian", "os_version": "12",
                                      "os_admin_user": "debian"}}
    log(f"image {IMAGE} {img.id} {img.status}")

    node = c.image.create_image(name=NODE_IMAGE, disk_format="raw", container_format="bare",
                                visibility="public", data=bytes(disk), **NODE_IMAGE_PROPS)
    node = c.image.get_image(node.id)
    seeded["node_image"] = {"name": NODE_IMAGE, "id": node.id, "status": node.status,
                            "properties": NODE_IMAGE_PROPS}
    log(f"image {NODE_IMAGE} {node.id} {node.status} (runs as Docker image "
        f"{NODE_IMAGE_PROPS['hvd_docker_image']})")

    if VM_IMAGE_DIR:
        seeded["vm_image"] = vm_image(c)

    pools = allocation_pools("203.0.113.10", "203.0.113.250", RESERVED_IPS)
    pub = c.network.create_network(name="public", is_router_external=True, is_shared=False,
                                   provider_network_type="flat",
                                   provider_physical_network="public")
    sub = c.network.create_subnet(name="public-subnet", network_id=pub.id, ip_version=4,
                                  cidr="203.0.113.0/24", gateway_ip="203.0.113.1",
                                  allocation_pools=pools, is_dhcp_enabled=False)
    seeded["external_network"] = {"name": "public", "id": pub.id, "subnet": "public-subnet",
                                  "subnet_id": sub.id, "cidr": "203.0.113.0/24",
                                  "gateway": "203.0.113.1", "allocation_pools": pools}
    log(f"external network public {pub.id}, subnet public-subnet 203.0.113.0/24, pools "
        + ", ".join(f"{p['start']}-{p['end']}" for p in pools))

    tenants = [c.identity.find_project(n, ignore_missing=False) for n in TENANTS]
    sfs = c.shared_file_system
    for p in tenants:
        c.compute.update_quota_set(p.id, **COMPUTE_QUOTA)
        c.network.update_quota(p.id, **NETWORK_QUOTA)
        r = sfs.put(f"/quota-sets/{p.id}", json={"quota_set": SHARE_QUOTA},
                    microversion=MANILA_MV)
        r.raise_for_status()
    seeded["quotas"] = {"compute": COMPUTE_QUOTA, "network": NETWORK_QUOTA,
                        "share": SHARE_QUOTA}

    r = sfs.post("/types", microversion=MANILA_MV, json={"share_type": {
        "name": "default", "share_type_access:is_public": True,
        "description": "NFS on the dummy backend",
        "extra_specs": {"driver_handles_share_servers": "False",
                        "snapshot_support": "True"}}})
    r.raise_for_status()
    seeded["share_type"] = {"name": "default", "id": r.json()["share_type"]["id"],
                            "driver_handles_share_servers": False}
    log(f"share type default (driver_handles_share_servers False), quotas of {', '.join(TENANTS)} set")

    if CINDER:
        vt = c.block_storage.create_type(name="standard", is_public=True,
                                         extra_specs={"volume_backend_name": "fake"})
        for p in tenants:
            c.block_storage.update_quota_set(p.id, **VOLUME_QUOTA)
        seeded["volume_type"] = {"name": "standard", "id": vt.id}
        seeded["quotas"]["volume"] = VOLUME_QUOTA
        log(f"volume type standard (default), volume quotas of {', '.join(TENANTS)} set")
    if CEPH:
        vt = c.block_storage.create_type(name="ceph", is_public=True,
                                         extra_specs={"volume_backend_name": "ceph"})
        seeded["volume_type_ceph"] = {"name": "ceph", "id": vt.id}
        log("volume type ceph (Ceph RBD: the libvirt guests boot from these)")

    wait_for_pool(lambda: sfs.get("/scheduler-stats/pools", microversion=MANILA_MV)
                  .json().get("pools", []), "manila")
    if CINDER:
        wait_for_pool(lambda: c.block_storage.get("/scheduler-stats/get_pools")
                      .json().get("pools", []), "cinder", want=2 if CEPH else 1)

    with open(os.path.join(STATE, "seed.json"), "w") as f:
        json.dump(seeded, f, indent=2)
    log(f"wrote {os.path.join(STATE, 'seed.json')}")


if __name__ == "__main__":
    {"identity": identity, "resources": resources}[sys.argv[1]]()
