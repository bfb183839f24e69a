# /shared is served (master) or mounted (worker) and shows the master's marker.
{% if role == "master" %}
test -d /shared && pgrep -x ganesha.nfsd >/dev/null && ss -Htln 'sport = :2049' | grep -q .
{% else %}
test -f /shared/.hvd-cluster-master
{% endif %}
