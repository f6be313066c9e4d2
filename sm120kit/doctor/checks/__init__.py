"""Doctor checks, one module per area; each registers its functions with ``registry.check``."""
