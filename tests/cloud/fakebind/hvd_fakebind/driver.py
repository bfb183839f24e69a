"""ML2 mechanism driver for a cloud with no L2 agents.

The test cloud runs nova-compute with the fake virt driver and no Open vSwitch or
OVN, so no agent ever reports a host as able to bind a port: with a stock driver
every port ends in binding_failed and every server in ERROR. This driver accepts
any host and binds the port to the first segment it is offered, as an OVS port,
and sets it ACTIVE at once (nothing will ever report the VIF as plugged).

Exception: on the hosts named in `[hvd_fakebind] bridge_hosts` (the libvirt compute host of the
test cloud) ports are bound as Linux-bridge ports (VIF_TYPE_BRIDGE, `bridge_name` brq + the
first 11 characters of the network id, as the old linuxbridge agent named them). Nova's os-vif
`linux_bridge` plugin makes that bridge and libvirt plugs the guest's tap into it; the agent
hvd-cloud-net-agent (dockervirt package) routes, NATs and filters around it.
"""
from neutron_lib import constants
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api
from oslo_config import cfg
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

cfg.CONF.register_opts([
    cfg.ListOpt("bridge_hosts", default=[],
                help="hosts whose ports are bound as Linux-bridge ports (VIF_TYPE_BRIDGE)"),
], group="hvd_fakebind")

BRIDGE_PREFIX = "brq"


def bridge_name(network_id):
    """The Linux bridge of a Neutron network on a bridge host (15 characters at most)."""
    return (BRIDGE_PREFIX + network_id)[:14]

_VIF_DETAILS = {
    portbindings.CAP_PORT_FILTER: True,
    portbindings.OVS_HYBRID_PLUG: False,
}


class FakeBindDriver(api.MechanismDriver):
    """Bind every port, on every host, to its first network segment."""

    def initialize(self):
        LOG.info("hvd fakebind: binding all ports without agents")

    @property
    def connectivity(self):
        # Tells ML2 the binding is plain L2, like OVS would offer.
        return portbindings.CONNECTIVITY_L2

    def bind_port(self, context):
        segments = context.segments_to_bind
        if not segments:
            LOG.warning("hvd fakebind: port %s has no segment to bind", context.current["id"])
            return
        segment = segments[0]
        if context.host in cfg.CONF.hvd_fakebind.bridge_hosts:
            details = {portbindings.CAP_PORT_FILTER: True,
                       portbindings.VIF_DETAILS_BRIDGE_NAME:
                           bridge_name(context.current["network_id"])}
            context.set_binding(segment[api.ID], portbindings.VIF_TYPE_BRIDGE, details,
                                status=constants.PORT_STATUS_ACTIVE)
            return
        context.set_binding(segment[api.ID], portbindings.VIF_TYPE_OVS, _VIF_DETAILS,
                            status=constants.PORT_STATUS_ACTIVE)
        LOG.debug("hvd fakebind: port %s bound on host %s to %s segment %s",
                  context.current["id"], context.host,
                  segment[api.NETWORK_TYPE], segment[api.ID])
