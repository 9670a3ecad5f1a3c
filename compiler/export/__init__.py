"""Exporters: a published release written in a serving system's own layout (Triton's model repository)."""
