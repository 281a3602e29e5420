"""The package version, in one place below both the package root and ``core.api`` (which
stamps it into every model's metadata); pyproject.toml reads it from here."""

__version__ = "0.1.0"
