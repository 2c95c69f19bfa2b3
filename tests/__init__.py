"""The test suite (a regular package: a top-level `tests` installed by a dependency must not shadow it)."""
