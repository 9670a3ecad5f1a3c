"""The plumbing every layer stands on: records (the typed files stages hand each other), option groups, errors
and exit codes, files and paths, YAML reading, text, progress, CI output, digests, GPUs, the SKU catalog and shape
profiles. It imports nothing else of compile's."""
