# The Horovod container runs with this exact configuration, on the image this node holds
# under the profile's name (a rebuilt or pulled image replaces it).
set -e
test "$(docker inspect -f '{{ "{{" }}.State.Running}} {{ "{{" }}index .Config.Labels "hvd-cluster.config"}}' hvd 2>/dev/null)" = "true {{ config_hash }}"
test "$(docker inspect -f '{{ "{{" }}.Image}}' hvd)" = "$(docker image inspect -f '{{ "{{" }}.Id}}' {{ image | shell_quote }})"
{% if runtime == "tool" %}# and on the runtime this node has now (made again when its OpenSSH changed)
test "$(docker inspect -f '{{ "{{" }}index .Config.Labels "hvd-cluster.runtime"}}' hvd)" = "$(cat {{ kit_dir }}/stamp)"
{% endif %}
