"""gpu-platform: a Kubernetes cluster's NVIDIA GPU nodes as a shared, packed, policed and observed
GPU platform. Everything is declared in components/; this file only runs it."""

from components.platform.config import stack_config, stack_secret_keys
from components.program import deploy

deploy(stack_config(), stack_secret_keys())
