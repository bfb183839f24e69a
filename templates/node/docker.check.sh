# Docker engine present and answering.
docker info >/dev/null 2>&1
