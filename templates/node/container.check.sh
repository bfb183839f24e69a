# The Horovod container runs with this exact configuration.
test "$(docker inspect -f '{{ "{{" }}.State.Running}} {{ "{{" }}index .Config.Labels "hvd-cluster.config"}}' hvd 2>/dev/null)" = "true {{ config_hash }}"
