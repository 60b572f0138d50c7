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


@pytest.fixture(scope="session")
def tutorial_runs(tmp_path_factory):
    """The tutorial notebooks' shared runs folder, with the demo's model trained into it
    once (`tools/docs.py`'s `train_demo`, which `execute_notebook` then finds there):
    notebooks 3 to 6 show that model."""
    from tools.docs import train_demo

    return train_demo(tmp_path_factory.mktemp("notebooks") / "runs").parent


@pytest.fixture(scope="session", autouse=True)
def full_float32():
    """Exact float32 matmuls on any device: TensorFlow's default TF32 on Ampere and later
    GPUs (about 1e-3 relative error) would fail the golden-value tests. The `tf32` fixture
    turns it back on for a test that checks training under TensorFlow's defaults."""
    from keras_saat.runtime.precision import set_tf32

    set_tf32(False)
    yield


@pytest.fixture(autouse=True)
def xla_settings_stay_in_their_test():
    """A training run in this process writes TF_XLA_FLAGS / XLA_FLAGS (its compilation
    cache, the GPU compiler defaults); the child processes of later tests must not
    inherit them."""
    saved = {k: os.environ.get(k) for k in ("TF_XLA_FLAGS", "XLA_FLAGS")}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def tf32():
    """TensorFlow's default: TF32 tensor-core matmuls where the GPU has them."""
    from keras_saat.runtime.precision import set_tf32

    set_tf32(True)
    yield
    set_tf32(False)
