#!/bin/sh
# Horovod elastic host discovery: the ready workers, as `host:slots`, from a file hvd-cluster
# replaces atomically. No cloud credentials on the nodes.
exec cat /etc/hvd-cluster/discovery/hosts
