"""CUTLASS kernel sources (include/scalemm, templates/) and their configurations (configs.py)."""
from .configs import GemmConfig, default_config, default_build_set

__all__ = ["GemmConfig", "default_config", "default_build_set"]
