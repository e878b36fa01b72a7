"""The test suite (a package, so `tests.<module>` is this directory even where a dependency ships its own `tests`)."""
