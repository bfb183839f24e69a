"""Nova compute driver for the hvd-cluster test cloud: some servers are real hosts.

A server whose Glance image has the property `hvd_docker_image` (Nova copies image
properties into system_metadata as image_<prop>) runs as a "node container" of that Docker
image, the way a VM would run: at the fixed IP Neutron gave its port, on a Docker bridge
network that stands for the Neutron network (the host holds the subnet's gateway address),
with the keypair's key for the image's login user and its user_data as a cloud-init NoCloud
seed. Every other server stays the fake driver's in-memory one, so tests that make dozens of
servers stay cheap. Resources and placement are the fake driver's for both kinds.

/shared stand-in: this machine's kernel has no NFS client or server, so every container on a
Neutron network mounts one Docker volume of that network at /shared. The master serves it over
userspace NFS (nfs-ganesha) and the workers read it with libnfs, as the project's local
provider does; on a real cloud the workers would mount the master's export instead. Like a
real server's disks, that volume outlives a shelve: it goes only when the last container on
the network is deleted, or once Neutron no longer knows the network (a cluster deleted while
shelved: Nova deletes an offloaded server without its driver).

Snapshots (Nova's createImage, as `hvd-cluster bake` calls it): the node container committed as
a Docker image and its /var/lib/docker volume (where the node's own Docker keeps its images: a
commit leaves volumes out) copied into a volume of the snapshot's. The Glance image names both
(hvd_docker_image, hvd_docker_volume); its bytes are a short note, where a real driver uploads
the disk. A server of that image starts from the committed image with a copy of that volume, as
a server booted from a real snapshot finds the disk's files. Stand-in: what `bake` cleans is
then read from the committed image's file system, not from a disk image.
"""
import base64
import io
import ipaddress
import json
import tarfile
import threading

from nova.compute import power_state
from nova.compute import task_states
from nova import context as nova_context
from nova import exception
from nova.image import glance
from nova.virt import fake
from nova.virt import hardware
from oslo_log import log as logging

from hvd_dockervirt.docker import (DockerError, INSTANCE_LABEL, LABEL, NETWORK_LABEL,
                                   SHARED_LABEL, container_name, docker, ids, inspect)

LOG = logging.getLogger(__name__)
SMALL_DISK_GB = 2

IMAGE_PROP = "image_hvd_docker_image"
# A snapshot's copy of its node's /var/lib/docker (see snapshot), seeded into each new node's own.
VOLUME_PROP = "image_hvd_docker_volume"
SNAPSHOT_LABEL = "hvd-cloud.snapshot"
# --privileged fails on a host whose capability bounding set lacks CAP_SYS_RESOURCE ("unable to
# apply caps"); this set lets the node's own dockerd, mounts and nfs-ganesha work everywhere.
NODE_FLAGS = ["--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt=seccomp=unconfined",
              "--security-opt=apparmor=unconfined", "--security-opt=systempaths=unconfined",
              "--device=/dev/fuse", "--device-cgroup-rule=a *:* rwm"]
SEED_DIR = "var/lib/cloud/seed/nocloud"
STATES = {"running": power_state.RUNNING, "restarting": power_state.RUNNING,
          "paused": power_state.PAUSED}   # created, exited, dead, missing: SHUTDOWN

# Held while Docker networks and shared volumes are made, used by a new container or removed
# when unused (one nova-compute process; green under eventlet).
_wiring = threading.Lock()


def _uplink_mtu():
    """MTU of the interface of this machine's default route (1500 if none)."""
    with open("/proc/net/route") as f:
        for line in f.readlines()[1:]:
            dev, dest = line.split()[:2]
            if dest == "00000000":
                with open(f"/sys/class/net/{dev}/mtu") as m:
                    return int(m.read())
    return 1500


def _vif_wiring(vif):
    """(neutron network id, cidr, gateway, fixed ip, mtu) of a VIF's first IPv4 address."""
    net = vif["network"]
    for subnet in net["subnets"]:
        if subnet["version"] == 4 and subnet["ips"]:
            gw = (subnet.get("gateway") or {}).get("address")
            return (net["id"], subnet["cidr"], gw, subnet["ips"][0]["address"],
                    net.get_meta("mtu"))
    raise DockerError(f"port {vif['id']} has no IPv4 address: only IPv4 is wired")


def _network_gone(net_id):
    """Neutron no longer knows NET_ID. On any doubt (Neutron not answering) the volume stays:
    a leak until tests/cloud/stop is better than a lost /shared."""
    from neutronclient.common import exceptions as neutron_errors
    from nova.network import neutron
    try:
        client = neutron.get_client(nova_context.get_admin_context(), admin=True)
        client.show_network(net_id)
        return False
    except neutron_errors.NotFound:
        return True
    except Exception as e:   # noqa: BLE001 - kept, and said
        LOG.warning("hvd docker driver: could not ask Neutron for network %s: %s", net_id, e)
        return False


def _copy_volume(image, source, target):
    """Copies volume SOURCE into volume TARGET with IMAGE's cp, keeping owners, modes, device
    nodes and extended attributes (an inner overlay2's whiteouts and opaque directories)."""
    if not inspect("volume", source):
        raise DockerError(f"volume {source} of the snapshot is gone from this machine")
    docker("run", "--rm", *NODE_FLAGS, "--network", "none", "-v", f"{source}:/from:ro",
           "-v", f"{target}:/to", "--entrypoint", "cp", image, "-a", "/from/.", "/to/",
           timeout=1800)


def _seed_tar(instance, key_data):
    """A tar of the NoCloud seed, extracted at / before the container first starts."""
    meta = {"instance-id": instance.uuid, "local-hostname": instance.hostname,
            "public-keys": [key_data] if key_data else []}
    files = {"meta-data": json.dumps(meta).encode(),   # JSON is YAML
             "user-data": base64.b64decode(instance.user_data) if instance.user_data else b""}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("var/lib/cloud", "var/lib/cloud/seed", SEED_DIR):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{SEED_DIR}/{name}")
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerNodeDriver(fake.FakeDriverWithoutFakeNodes):
    """The fake driver, plus node containers for servers of images marked hvd_docker_image."""

    def init_host(self, host):
        super().init_host(host)
        self._mtu = _uplink_mtu()
        try:
            found = inspect("container", *ids("container", f"label={INSTANCE_LABEL}"))
            self._containers = {c["Config"]["Labels"][INSTANCE_LABEL] for c in found}
            LOG.info("hvd docker driver: %d node container(s) found, uplink MTU %d",
                     len(self._containers), self._mtu)
        except DockerError as e:   # fake servers still work; marked ones will fail to spawn
            self._containers = set()
            LOG.warning("hvd docker driver: Docker does not answer: %s", e)

    def _is_node(self, instance):
        return instance.uuid in self._containers or bool(
            instance.system_metadata.get(IMAGE_PROP))

    def get_console_output(self, context, instance):
        """A node server's console: its container's output, where the node image's entrypoint
        prints the host keys as cloud-init does on a real server's console."""
        if not self._is_node(instance):
            return super().get_console_output(context, instance)
        try:
            return docker("logs", "--tail", "1000", container_name(instance.uuid))
        except DockerError as e:
            LOG.warning("hvd docker driver: no console: %s", e, instance=instance)
            raise exception.ConsoleNotAvailable()

    # ------------------------------------------------------------------ lifecycle
    def spawn(self, context, instance, image_meta, injected_files, admin_password,
              allocations, network_info=None, block_device_info=None, power_on=True,
              accel_info=None):
        image = instance.system_metadata.get(IMAGE_PROP)
        if image:
            try:
                key_data = instance.key_data
                if not key_data:
                    # An unshelve hands the driver the instance with key_data scrubbed (and
                    # saved so until the spawn is over): a real driver restores the root disk,
                    # which holds the key. A node container starts from its image again, so it
                    # takes the key from the instance's keypairs (kept apart, not scrubbed), as
                    # cloud-init on a fresh disk takes it from the metadata service.
                    keypairs = instance.keypairs
                    key_data = "\n".join(k.public_key for k in keypairs) if keypairs else ""
                self._run_container(instance, image, network_info or [], power_on, key_data)
            except DockerError as e:
                LOG.error("hvd docker driver: %s", e, instance=instance)
                try:
                    self._remove_container(instance.uuid)   # leave nothing half made
                except DockerError as e2:
                    LOG.warning("hvd docker driver: cleanup failed: %s", e2, instance=instance)
                # aborts the build (no reschedule, which would bury the reason under
                # "no valid host") and becomes the server's fault message
                raise exception.BuildAbortException(instance_uuid=instance.uuid, reason=str(e))
        super().spawn(context, instance, image_meta, injected_files, admin_password,
                      allocations, network_info=network_info,
                      block_device_info=block_device_info, power_on=power_on,
                      accel_info=accel_info)

    def _run_container(self, instance, image, network_info, power_on, key_data):
        name = container_name(instance.uuid)
        try:
            docker("image", "inspect", "--format", "{{.Id}}", image)
        except DockerError:
            raise DockerError(f"Docker image {image} (property hvd_docker_image of the server's "
                              "image) is not on this machine: run scripts/build-images node")
        vifs = [_vif_wiring(v) for v in network_info]
        user = instance.system_metadata.get("image_os_admin_user") or "debian"
        volume = f"{name}-docker"
        args = ["create", "--name", name, "--hostname", instance.hostname,
                "--label", f"{LABEL}=1", "--label", f"{INSTANCE_LABEL}={instance.uuid}",
                *NODE_FLAGS, "-v", f"{volume}:/var/lib/docker",
                "-e", f"NODE_USER={user}", "-e", f"SSH_AUTHORIZED_KEYS={key_data or ''}"]
        # A root disk of at most SMALL_DISK_GB is the node's real room for Docker: a tmpfs of
        # that size (filled only as used); larger ones share this machine's disk.
        root_gb = instance.flavor.root_gb or 0
        room = (["--driver", "local", "--opt", "type=tmpfs", "--opt", "device=tmpfs",
                 "--opt", f"o=size={root_gb}g"] if 0 < root_gb <= SMALL_DISK_GB else [])
        with _wiring:
            nets = [self._ensure_network(*v) for v in vifs]
            docker("volume", "create", "--label", f"{LABEL}=1",
                   "--label", f"{INSTANCE_LABEL}={instance.uuid}", *room, volume)
            seed = instance.system_metadata.get(VOLUME_PROP)
            if seed:
                # a snapshot's server: its Docker's files, as its disk would hold them
                _copy_volume(image, seed, volume)
            if vifs:
                shared = self._ensure_shared_volume(vifs[0][0])
                args += ["-v", f"{shared}:/shared", "--network", nets[0], "--ip", vifs[0][3]]
            else:
                args += ["--network", "none"]
            docker(*args, image)
            self._containers.add(instance.uuid)
            for net, vif in zip(nets[1:], vifs[1:]):
                docker("network", "connect", "--ip", vif[3], net, name)
        # the seed is on the container's disk before its first boot, as a config drive would be
        docker("cp", "-", f"{name}:/", stdin=_seed_tar(instance, key_data))
        if power_on:
            docker("start", name)
        LOG.info("hvd docker driver: %s runs %s at %s", name, image,
                 ", ".join(v[3] for v in vifs) or "no network", instance=instance)

    def _ensure_network(self, net_id, cidr, gateway, ip, mtu):
        """The Docker bridge network standing for Neutron network NET_ID; made on first use."""
        name = f"hvd-net-{net_id}"
        if inspect("network", name):
            return name
        if not gateway:   # Docker's bridge needs an address: the subnet's last one
            gateway = str(ipaddress.ip_network(cidr)[-2])
        mtu = min(mtu or 1500, self._mtu)   # nodes also reach the outside through the uplink
        try:
            docker("network", "create", "--driver", "bridge", "--subnet", cidr,
                   "--gateway", gateway, "-o", f"com.docker.network.driver.mtu={mtu}",
                   "--label", f"{LABEL}=1", "--label", f"{NETWORK_LABEL}={net_id}", name)
        except DockerError as e:
            want = ipaddress.ip_network(cidr)
            for n in inspect("network", *ids("network")):
                for c in (n.get("IPAM") or {}).get("Config") or []:
                    if "Subnet" in c and ipaddress.ip_network(c["Subnet"]).overlaps(want):
                        raise DockerError(
                            f"subnet {cidr} of Neutron network {net_id} overlaps the Docker "
                            f"network {n['Name']} ({c['Subnet']}) on this machine: use another "
                            f"CIDR or remove that network")
            raise e
        return name

    def _ensure_shared_volume(self, net_id):
        name = f"hvd-shared-{net_id}"
        docker("volume", "create", "--label", f"{LABEL}=1", "--label",
               f"{SHARED_LABEL}={net_id}", name)   # a no-op if it exists
        return name

    def destroy(self, context, instance, network_info, block_device_info=None,
                destroy_disks=True, destroy_secrets=True):
        if self._is_node(instance):
            # a shelve offload keeps the server's disks: here, its network's /shared
            shelving = instance.task_state == task_states.SHELVING_OFFLOADING
            self._remove_container(instance.uuid, keep_shared=shelving)
        super().destroy(context, instance, network_info, block_device_info=block_device_info,
                        destroy_disks=destroy_disks, destroy_secrets=destroy_secrets)

    def _remove_container(self, uuid, keep_shared=False):
        """Container, its volume, the networks nobody uses any more, its network's /shared
        volume once no container uses it (unless KEEP_SHARED: a shelve), and the /shared
        volumes of networks Neutron deleted. Idempotent: whatever is already gone is skipped."""
        name = container_name(uuid)
        with _wiring:
            found = inspect("container", name)
            own_shared = {m.get("Name") for c in found for m in c.get("Mounts") or []
                          if m.get("Destination") == "/shared"}
            if found:
                docker("rm", "--force", name, timeout=300)
            if inspect("volume", f"{name}-docker"):
                docker("volume", "rm", f"{name}-docker", timeout=300)
            self._containers.discard(uuid)
            for net in ids("network", f"label={NETWORK_LABEL}"):
                if not ids("container", f"network={net}"):
                    docker("network", "rm", net)
            for vol in ids("volume", f"label={SHARED_LABEL}"):
                if ids("container", f"volume={vol}"):
                    continue
                if vol in own_shared and not keep_shared:
                    docker("volume", "rm", vol)
                elif vol not in own_shared and _network_gone(vol.removeprefix("hvd-shared-")):
                    docker("volume", "rm", vol)
        LOG.info("hvd docker driver: removed %s", name)

    # ------------------------------------------------------------------ snapshot
    def snapshot(self, context, instance, image_id, update_task_state):
        # createImage only: a shelve's snapshot stays the fake driver's (the node's disks are
        # not kept across shelve and unshelve here; /shared is)
        if not self._is_node(instance) or instance.task_state != task_states.IMAGE_SNAPSHOT:
            return super().snapshot(context, instance, image_id, update_task_state)
        name = container_name(instance.uuid)
        if not inspect("container", name):
            raise exception.InstanceNotRunning(instance_id=instance.uuid)
        update_task_state(task_state=task_states.IMAGE_PENDING_UPLOAD)
        tag = f"hvd-cloud/snapshot:{image_id}"
        volume = f"hvd-snapshot-{image_id}-docker"
        try:
            docker("commit", "--change", f"LABEL {LABEL}=1", "--change",
                   f"LABEL {SNAPSHOT_LABEL}={image_id}", name, tag, timeout=1800)
            docker("volume", "create", "--label", f"{LABEL}=1", "--label",
                   f"{SNAPSHOT_LABEL}={image_id}", volume)
            _copy_volume(tag, f"{name}-docker", volume)
        except DockerError as e:
            LOG.error("hvd docker driver: snapshot %s: %s", image_id, e, instance=instance)
            raise exception.NovaException(str(e))
        update_task_state(task_state=task_states.IMAGE_UPLOADING,
                          expected_state=task_states.IMAGE_PENDING_UPLOAD)
        meta = {"disk_format": "raw", "container_format": "bare",
                "properties": {"hvd_docker_image": tag, "hvd_docker_volume": volume}}
        note = (f"hvd test cloud snapshot: Docker image {tag}, volume {volume}\n").encode()
        glance.API().update(context, image_id, meta, data=io.BytesIO(note), purge_props=False)
        LOG.info("hvd docker driver: snapshot %s of %s: %s and %s", image_id, name, tag, volume,
                 instance=instance)

    # ------------------------------------------------------------------ power
    def get_info(self, instance, use_cache=True):
        if instance.uuid not in self._containers:
            return super().get_info(instance, use_cache=use_cache)
        found = inspect("container", container_name(instance.uuid))
        state = found[0]["State"]["Status"] if found else "missing"
        return hardware.InstanceInfo(state=STATES.get(state, power_state.SHUTDOWN))

    def power_off(self, instance, timeout=0, retry_interval=0):
        if instance.uuid in self._containers:
            self._docker_power(instance, "stop", "--time", str(timeout))
        super().power_off(instance, timeout, retry_interval)

    def power_on(self, context, instance, network_info, block_device_info=None,
                 accel_info=None, share_info=None):
        if instance.uuid in self._containers:
            self._docker_power(instance, "start")
        super().power_on(context, instance, network_info, block_device_info=block_device_info,
                         accel_info=accel_info, share_info=share_info)

    def reboot(self, context, instance, network_info, reboot_type, block_device_info=None,
               bad_volumes_callback=None, accel_info=None, share_info=None):
        if instance.uuid in self._containers:
            grace = "0" if reboot_type.lower() == "hard" else "30"
            self._docker_power(instance, "restart", "--time", grace)
        super().reboot(context, instance, network_info, reboot_type,
                       block_device_info=block_device_info,
                       bad_volumes_callback=bad_volumes_callback, accel_info=accel_info,
                       share_info=share_info)

    def _docker_power(self, instance, verb, *args):
        name = container_name(instance.uuid)
        if verb == "stop" and not inspect("container", name):
            return   # gone already: it is off
        try:
            docker(verb, *args, name, timeout=300)
        except DockerError as e:
            raise exception.NovaException(str(e))
