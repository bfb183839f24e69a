# (Re)creates the Horovod container: host network, /shared, the cluster's keys, and the
# node names (ssh_config.d) that the elastic discovery script prints.
set -e
docker rm -f hvd >/dev/null 2>&1 || true
docker run -d --name hvd --restart unless-stopped --network host \
  --hostname "$(hostname)" \
  --label hvd-cluster.config={{ config_hash }} \
  -e HVD_SSH_PORT={{ ssh_port }} \
  -v /shared:/shared \
  -v /etc/hvd-cluster:/etc/hvd-cluster:ro \
  -v /etc/hvd-cluster/ssh_config.d:/etc/ssh/ssh_config.d:ro \
{% if gpus > 0 %}  --gpus all \
{% endif %}{% if role == "master" %}  -e HVD_JUPYTER=1 \
{% endif %}  {{ image | shell_quote }} >/dev/null
