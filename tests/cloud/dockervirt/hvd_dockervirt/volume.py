"""Cinder volume driver for the hvd-cluster test cloud: Cinder's fake driver, plus volumes
made from a Glance image.

STAND-IN: a storage backend. Cinder's own FakeLoggingVolumeDriver keeps volumes in its
database only, and a volume made from an image fails there (Cinder downloads the image and
inspects it through a privileged helper this cloud does not run). This driver answers as a
backend that clones images in place (as Ceph's RBD driver does): it checks that the image
fits the volume and keeps nothing, since the fake-driver servers that boot from such volumes
read no disk. What it proves is the API path (Nova's block_device_mapping_v2, Cinder's
create from image, attach, shelve, delete); the libvirt guests need a real backend for that.
"""
from oslo_log import log as logging

from cinder.tests.fake_driver import FakeLoggingVolumeDriver

LOG = logging.getLogger(__name__)


class ImageFakeVolumeDriver(FakeLoggingVolumeDriver):
    def clone_image(self, context, volume, image_location, image_meta, image_service):
        size = int(image_meta.get("size") or 0)
        min_disk = int(image_meta.get("min_disk") or 0)
        if size > volume["size"] * 1024 ** 3 or min_disk > volume["size"]:
            raise ValueError("image %s (%d bytes, min_disk %d GiB) does not fit in volume %s "
                             "(%d GiB)" % (image_meta.get("id"), size, min_disk, volume["id"],
                                          volume["size"]))
        LOG.info("volume %s made from image %s (%d bytes; nothing kept)",
                 volume["id"], image_meta.get("id"), size)
        return None, True
