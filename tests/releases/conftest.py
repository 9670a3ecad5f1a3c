"""The store suite's fixtures (a local folder, S3 and an OCI registry; two build folders) for the release tests."""

from tests.stores.conftest import builds, store  # noqa: F401 - fixtures, found by pytest through this conftest
