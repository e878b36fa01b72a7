"""Process-level CPU settings, defined on the ground floor (`prefalign.cpu`) and re-exported for stage 1."""

from prefalign.cpu import tune_allocator

__all__ = ["tune_allocator"]
