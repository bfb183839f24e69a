# hvd-cluster: Jupyter's token comes from a file (JUPYTER_TOKEN_FILE), never from argv or the
# environment: horovodrun copies its caller's environment onto every worker's ssh command line,
# and argv is world-readable in ps.
import os

c = get_config()  # noqa: F821 (injected by jupyter)
_token_file = os.environ.get("JUPYTER_TOKEN_FILE", "/etc/hvd-cluster/jupyter/token")
if os.path.exists(_token_file):
    with open(_token_file, encoding="utf-8") as f:
        c.IdentityProvider.token = f.read().strip()
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}
