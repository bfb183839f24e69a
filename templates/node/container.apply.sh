# (Re)creates the Horovod container: host network, /shared, /staged, the containers' key (never the
# hosts' login key), and the node names (ssh_config.d) that the elastic discovery script prints.
# On the master, Jupyter Lab also reads the folder JUPYTER_CONFIG_PATH names, where a public
# Jupyter's HTTPS certificate is set (written by the "keys and files" step).
set -e
image={{ image | shell_quote }}
# `hvd-cluster stage` copies datasets from /shared onto this node's own disk: /staged in the
# container (on the data disk where the flavor has one).
install -d -m 755 /var/lib/hvd-cluster/data/staged
{% if runtime == "tool" %}# A user's image: what the cluster needs comes from the runtime folder (runtime.apply.sh),
# not from the image. The container runs the runtime's entry script as root; the image's own
# ENTRYPOINT, CMD and USER are not run (the first two would start its own program, and sshd
# needs root); its WORKDIR and ENV stay.
kit={{ kit_dir }}
node_platform=$(docker version -f '{{ "{{" }}.Server.Os}}/{{ "{{" }}.Server.Arch}}')
image_platform=$(docker image inspect -f '{{ "{{" }}.Os}}/{{ "{{" }}.Architecture}}' "$image")
if [ "$node_platform" != "$image_platform" ]; then
  echo "the image $image is built for $image_platform; this node runs $node_platform" >&2
  exit 1
fi
image_path=$(docker image inspect -f '{{ "{{" }}range .Config.Env}}{{ "{{" }}println .}}{{ "{{" }}end}}' "$image" | sed -n 's/^PATH=//p' | head -n 1)
[ -n "$image_path" ] || image_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# the runtime's ssh first (horovodrun's), then the image's own, then `python` if it lacks one
path="$kit/bin:$image_path:/run/hvd-cluster/bin"
in_image() {  # a throwaway container of the image running the runtime's entry script
  docker run --rm --user 0 --entrypoint /bin/sh -e PATH="$path" -v "$kit:$kit:ro" "$@"
}
{% if role == "master" %}# Jupyter Lab in the image's own Python: the image's where it has one, else installed with the
# image's pip into a folder of this node kept for this image.
jupyter=/opt/hvd-cluster/jupyter/$(docker image inspect -f '{{ "{{" }}.Id}}' "$image" | sed 's/^sha256://' | cut -c1-16)
install -d -m 755 "$jupyter"
user_base="-e PYTHONUSERBASE=/opt/hvd-cluster/jupyter -v $jupyter:/opt/hvd-cluster/jupyter"
{% else %}user_base=
{% endif %}# shellcheck disable=SC2086
facts=$(in_image --network none $user_base "$image" "$kit/entry.sh" --probe 2>&1) || {
  echo "the image $image cannot run as the cluster's containers: $facts" >&2
  exit 1
}
{% if role == "master" %}case $facts in
  *jupyter=no*)
    echo "the image $image has no Jupyter Lab and no pip to install one: add jupyterlab to the image" >&2
    exit 1 ;;
  *jupyter=pip*)
    # shellcheck disable=SC2086
    out=$(in_image --network host $user_base "$image" "$kit/entry.sh" --install-jupyter 2>&1) || {
      echo "the image $image: $out" >&2
      exit 1
    }
    echo "hvd-note: the image has no Jupyter Lab: installed it from PyPI with the image's own pip (kept on this node for this image)" ;;
esac
{% endif %}docker rm -f hvd >/dev/null 2>&1 || true
# shellcheck disable=SC2086
docker run -d --name hvd --restart unless-stopped --network host \
  --hostname "$(hostname)" --init --user 0 --entrypoint /bin/sh \
  --label hvd-cluster.config={{ config_hash }} \
  --label "hvd-cluster.runtime=$(cat "$kit/stamp")" \
  -e HVD_SSH_PORT={{ ssh_port }} -e PATH="$path" \
  -v /shared:/shared \
  -v /var/lib/hvd-cluster/data/staged:/staged \
  -v /etc/hvd-cluster:/etc/hvd-cluster:ro \
  -v "$kit:$kit:ro" \
{% if gpus > 0 %}  --gpus all \
{% endif %}{% if role == "master" %}  -e HVD_JUPYTER=1 -e JUPYTER_CONFIG_PATH=/etc/hvd-cluster/jupyter/config $user_base \
{% endif %}  "$image" "$kit/entry.sh" >/dev/null
{% else %}docker rm -f hvd >/dev/null 2>&1 || true
docker run -d --name hvd --restart unless-stopped --network host \
  --hostname "$(hostname)" \
  --label hvd-cluster.config={{ config_hash }} \
  -e HVD_SSH_PORT={{ ssh_port }} \
  -v /shared:/shared \
  -v /var/lib/hvd-cluster/data/staged:/staged \
  -v /etc/hvd-cluster:/etc/hvd-cluster:ro \
  -v /etc/hvd-cluster/ssh_config.d:/etc/ssh/ssh_config.d:ro \
{% if gpus > 0 %}  --gpus all \
{% endif %}{% if role == "master" %}  -e HVD_JUPYTER=1 -e JUPYTER_CONFIG_PATH=/etc/hvd-cluster/jupyter/config \
{% endif %}  "$image" >/dev/null
{% endif %}
