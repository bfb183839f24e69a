# hvd-cluster's Jupyter configuration in a user's image. The token comes from a file, never from
# argv or the environment (horovodrun copies its caller's environment onto every worker's ssh
# command line, and argv is world-readable in ps).
import os
import shutil

c = get_config()  # noqa: F821 (injected by jupyter)
_token_file = os.environ.get("JUPYTER_TOKEN_FILE", "/etc/hvd-cluster/jupyter/token")
if os.path.exists(_token_file):
    with open(_token_file, encoding="utf-8") as f:
        _token = f.read().strip()
    c.IdentityProvider.token = _token  # Jupyter Server 2
    c.ServerApp.token = _token  # Jupyter Server 1 (an image's own older Jupyter)
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
# not a login shell: its profile would reset PATH, which carries the runtime's ssh
c.ServerApp.terminado_settings = {"shell_command": [shutil.which("bash") or "/bin/sh"]}
