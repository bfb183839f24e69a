"""Agent-less port binding for the hvd-cluster test cloud (see driver.py)."""
