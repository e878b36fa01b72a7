"""User-facing errors, defined on the ground floor (`prefalign.errors`) and re-exported for stage 1."""

from prefalign.errors import ConfigError, UserError, did_you_mean

__all__ = ["ConfigError", "UserError", "did_you_mean"]
