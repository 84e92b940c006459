"""motor's configuration contract: user_config.json "v2.0" + env.json "2.0.0" (pure)."""

from motor.config.errors import ConfigError, ConfigIssue
from motor.config.loader import ConfigPathError, load_config, load_documents, resolve_config_paths
from motor.config.roles import RoleSpec
from motor.config.topology import Topology

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "ConfigPathError",
    "RoleSpec",
    "Topology",
    "load_config",
    "load_documents",
    "resolve_config_paths",
]
