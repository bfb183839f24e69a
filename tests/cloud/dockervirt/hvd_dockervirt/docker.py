"""The docker CLI, as the driver and the agent call it, and the names and labels they share.

Everything the test cloud makes in Docker carries the label hvd-cloud=1, which is how
tests/cloud/stop finds it all again.
"""
import json
import subprocess

LABEL = "hvd-cloud"
INSTANCE_LABEL = "hvd-cloud.instance"   # containers and their /var/lib/docker volumes
NETWORK_LABEL = "hvd-cloud.network"     # Docker networks made for a Neutron network
SHARED_LABEL = "hvd-cloud.shared"       # the /shared volume of a Neutron network


def container_name(instance_uuid):
    return f"hvd-nova-{instance_uuid}"


class DockerError(Exception):
    pass


def docker(*args, stdin=None, timeout=120):
    """Run `docker ARGS...`; its stdout, or DockerError with its stderr."""
    try:
        p = subprocess.run(["docker", *args], input=stdin, capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DockerError(f"docker {args[0]} {args[1] if len(args) > 1 else ''}: "
                          f"no answer within {timeout}s")
    except FileNotFoundError:
        raise DockerError("no docker CLI on this machine")
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip().replace("Error response from daemon: ", "")
        raise DockerError(f"docker {' '.join(args[:2])}: {err}")
    return p.stdout.decode(errors="replace")


def inspect(kind, *names):
    """`docker KIND inspect` of NAMES as a list of dicts; the missing ones are left out."""
    if not names:
        return []
    p = subprocess.run(["docker", kind, "inspect", *names], capture_output=True, timeout=60)
    return json.loads(p.stdout or b"[]")  # exit 1 if one is missing, the others still listed


def ids(kind, *filters):
    """Ids (volumes: names) of KIND (container|volume|network) matching every filter."""
    cmd = {"container": ["ps", "-aq"], "volume": ["volume", "ls", "-q"],
           "network": ["network", "ls", "-q"]}[kind]
    for f in filters:
        cmd += ["--filter", f]
    return docker(*cmd).split()
