"""Real hosts for the hvd-cluster test cloud: a Nova driver that runs servers as node
containers (driver.py) and the agent that wires floating IPs to them (fipagent.py)."""
