# NVIDIA driver loaded and the container toolkit registered with Docker.
nvidia-smi -L >/dev/null 2>&1 && docker info 2>/dev/null | grep -qi 'nvidia'
