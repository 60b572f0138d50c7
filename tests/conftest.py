import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from keras_saat.data.shapes import write_shapes_dataset  # noqa: E402


@pytest.fixture(scope="session")
def shapes_dir(tmp_path_factory):
    """A small Shapes dataset shared by the tests (40 train, 8 val, 8 test)."""
    out = tmp_path_factory.mktemp("shapes")
    write_shapes_dataset(out, train=40, val=8, test=8, seed=7)
    return out
