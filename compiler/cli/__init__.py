"""The `compile` command: a thin Typer layer over the typed Python API (docs/architecture.md)."""
