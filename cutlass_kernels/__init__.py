"""CUTLASS kernel sources (include/scalemm, templates/) and their configurations (configs/: one
module per GPU architecture, configs/sm90.py for Hopper)."""
from .configs import GemmConfig, default_build_set, default_config, for_arch

__all__ = ["GemmConfig", "default_config", "default_build_set", "for_arch"]
