"""Nova's version (also in pyproject.toml): part of every kernel and plan cache key."""
__version__ = "0.1.0"
