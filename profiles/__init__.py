"""Bundled data: the GPU SKU catalog (skus.yaml) and example shape profiles."""
