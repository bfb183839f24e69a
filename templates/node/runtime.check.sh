# The runtime for a user's image is on this node, made from its present OpenSSH and these files.
set -e
test "$(cat {{ kit_dir }}/stamp 2>/dev/null)" = "$(hvd_runtime_stamp {{ files_hash }})"
