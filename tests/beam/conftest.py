"""The trained model and its export, shared with the serving tests (tests/serving/conftest.py)."""

from tests.serving.conftest import export_base, test_images, trained_workdir  # noqa: F401
