#!/bin/sh
# Runs inside the freshly debootstrapped root (chroot) of the base image.
# Args: none. Extra CA certificates, if any, are already in /usr/local/share/ca-certificates.
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
rm -f /etc/apt/sources.list
apt-get update -q
apt-get -y -q -o Dpkg::Options::=--force-confold dist-upgrade
update-ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log /var/cache/debconf/*-old /var/lib/dpkg/*-old
# files that belong to the machine, not to the image
rm -f /etc/machine-id /var/lib/dbus/machine-id /etc/hostname /etc/resolv.conf
: > /etc/hosts
