"""nova-compute.conf: compute_driver = hvd_docker.DockerNodeDriver (hvd-cluster test cloud)."""
from hvd_dockervirt.driver import DockerNodeDriver  # noqa: F401
