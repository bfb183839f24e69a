# The runtime for an image that is not ours (what horovodrun and Jupyter need, brought from
# outside the image): this node's own sshd and ssh with every library they load and the
# dynamic loader itself, so they run inside any image whatever its C library; the entry script
# and the configuration files; a host key kept across runs. Made in a new folder and swapped
# in whole; the container step mounts it read-only at the same path.
set -e
kit={{ kit_dir }}
base={{ base_dir }}
sshd=/usr/sbin/sshd
ssh=$(command -v ssh || true)
if [ ! -x "$sshd" ] || [ -z "$ssh" ]; then
  echo "this node has no OpenSSH server and client ($sshd, ssh): the runtime for the image is made from them" >&2
  exit 1
fi
programs="$sshd $ssh"
for p in /usr/lib/openssh/sshd-session /usr/lib/openssh/sshd-auth; do
  [ -x "$p" ] && programs="$programs $p"
done
# shellcheck disable=SC2086
loader=$(ldd $programs | sed -n 's|^[[:space:]]*\(/[^[:space:]]*/ld[^[:space:]]*\.so[^[:space:]]*\) (0x.*|\1|p' | head -n 1)
[ -n "$loader" ] || { echo "cannot find the dynamic loader of $sshd in: $(ldd "$sshd" 2>&1 | tail -n 3)" >&2; exit 1; }
install -d -m 755 "$base"
new=$(mktemp -d "$base/.runtime.XXXXXX")
trap 'rm -rf "$new"' EXIT
chmod 755 "$new"
install -d -m 755 "$new/bin" "$new/lib" "$new/libexec"
# shellcheck disable=SC2086
cp $programs "$new/libexec/"
# shellcheck disable=SC2086
for lib in $(ldd $programs | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
  cp -L "$lib" "$new/lib/"
done
cp -L "$loader" "$new/lib/ld.so"
# glibc's NSS modules an image's nsswitch.conf may name (`files` is inside libc since 2.34)
libdir=$(dirname "$(ldd "$sshd" | awk '$1 ~ /^libc\.so/ {print $3}')")
for m in libnss_files.so.2 libnss_compat.so.2; do
  [ -e "$libdir/$m" ] && cp -L "$libdir/$m" "$new/lib/"
done
wrapper() {  # NAME: a program of the kit, run by the kit's loader with the kit's libraries
  printf '#!/bin/sh\nexec %s/lib/ld.so --inhibit-cache --library-path %s/lib %s/libexec/%s %s"$@"\n' \
    "$kit" "$kit" "$kit" "$1" "$2" > "$new/bin/$1"
  chmod 755 "$new/bin/$1"
}
wrapper ssh "-F $kit/ssh_config "
[ -e "$new/libexec/sshd-session" ] && wrapper sshd-session ""
[ -e "$new/libexec/sshd-auth" ] && wrapper sshd-auth ""
{% for f in files %}printf '%s' {{ f.b64 | shell_quote }} | base64 -d > "$new/"{{ f.name | shell_quote }}
chmod 644 "$new/"{{ f.name | shell_quote }}
{% endfor %}[ -s "$base/ssh_host_ed25519_key" ] \
  || ssh-keygen -q -t ed25519 -N '' -C hvd-cluster-container -f "$base/ssh_host_ed25519_key"
install -m 600 "$base/ssh_host_ed25519_key" "$new/ssh_host_ed25519_key"
hvd_runtime_stamp {{ files_hash }} > "$new/stamp"
rm -rf "$kit.old"
if [ -d "$kit" ]; then mv "$kit" "$kit.old"; fi
mv "$new" "$kit"
trap - EXIT
rm -rf "$kit.old"
