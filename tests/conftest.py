"""The suite's shared fixtures. `make test` runs the suite on one pytest-xdist worker a
core (`-n auto --dist loadgroup`): the session fixtures that train or write a dataset
are made once for all workers (`made_once`), and the tests that share the tutorials'
trained model run on one worker, in order (`tests.helpers.TUTORIALS`)."""

import contextlib
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _fast_xla_compiles():
    """XLA's CPU backend without LLVM's optimisation passes (-O0), for this process and
    the children it starts (before TensorFlow loads): the same HLO, the same fusions and
    kernels, machine code that LLVM does not optimise. The suite compiles many small XLA
    programs and runs each for a few steps; at -O0 a tiny train step's first call (trace
    and compile) takes 0.5-0.7 times as long and each later step 2.1-2.6 times
    (docs/performance.md, "The test suite"). A level the user's XLA_FLAGS names is kept.
    The tutorials run as a reader runs them (`readers_xla_flags`)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()


_READERS_XLA_FLAGS = os.environ.get("XLA_FLAGS")  # before the suite's own
_fast_xla_compiles()


import pytest  # noqa: E402

from keras_saat.data.shapes_dataset import write_shapes_dataset  # noqa: E402


@contextlib.contextmanager
def readers_xla_flags():
    """XLA_FLAGS as the user had them, without the suite's -O0, while the block runs (and in
    the processes it starts): the demo and the executed notebooks, whose pages show their
    step times, compile as a reader's run does."""
    suite = os.environ.get("XLA_FLAGS")
    if _READERS_XLA_FLAGS is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = _READERS_XLA_FLAGS
    try:
        yield
    finally:
        if suite is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = suite


@pytest.fixture
def as_a_reader():
    """`readers_xla_flags` for the test (the executed notebooks)."""
    with readers_xla_flags():
        yield


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker a core the process may use, at most 4 (each worker holds
    TensorFlow and its tests' models, 1-3 GB)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def pytest_configure(config):
    """`--dist loadgroup` needs each worker to name a grouped test by its id and group
    ("...@tutorials"); pytest-xdist 3.8 cannot with pytest 9.2 and then runs the group's
    tests on any worker, silently (the tutorials' model trained twice, the site built
    from notebooks not yet run; pytest-dev/pytest-xdist#1386). Say so instead."""
    if config.getoption("dist", "no") != "loadgroup" or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import xdist
    from packaging.version import Version

    if Version(pytest.__version__) >= Version("9.2") and Version(xdist.__version__) < Version(
        "3.9"
    ):
        raise pytest.UsageError(
            f"pytest-xdist {xdist.__version__} does not group tests under --dist loadgroup "
            f"with pytest {pytest.__version__}: install the test extra's pytest "
            "(pip install -e '.[test]', which pins pytest < 9.2), or run with -n 0"
        )


def made_once(tmp_path_factory, name, make):
    """The folder `name`, made by `make(folder)` once for the whole run: under
    pytest-xdist the first worker to ask makes it, holding a file lock, and the others
    wait for it and reuse it. Its users only read it.

    Args:
        tmp_path_factory: pytest's.
        name: str. The folder's name in the run's temporary root.
        make: callable(folder). Writes the folder (which does not exist yet).

    Returns:
        Path: the folder.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's root, above each worker's own
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def shapes_dir(tmp_path_factory):
    """A small Shapes dataset shared by the tests (40 train, 8 val, 8 test)."""
    return made_once(
        tmp_path_factory,
        "shapes",
        lambda out: write_shapes_dataset(out, train=40, val=8, test=8, seed=7),
    )


@pytest.fixture(scope="session")
def trained_workdir(shapes_dir, tmp_path_factory):
    """A captioner trained for 4 epochs on the small Shapes dataset, through the CLI: the
    one trained model the serving and Beam tests share (tests that need only a working
    model use `small_preset` and `small_export`, which train nothing).

    Its captions are real words (one epoch only ever says <end>).
    """
    from keras_saat.cli import main
    from tests.helpers import DEFAULTS

    def train(serving):
        argv = ["train", "--config", DEFAULTS, "--workdir", str(serving / "run")]
        for setting in (
            "data.dataset=karpathy",
            f"data.path={shapes_dir / 'dataset_shapes.json'}",
            "train.epochs=4",
            "train.learning_rate=0.005",
            "train.batch_size=16",
            "decode.max_length=8",
            "decode.meteor=false",  # no test reads its METEOR (10-20 s of Java)
        ):
            argv += ["--set", setting]
        assert main(argv) == 0

    return made_once(tmp_path_factory, "serving", train) / "run"


@pytest.fixture(scope="session")
def export_base(trained_workdir, tmp_path_factory):
    """`keras-saat export` of that model: BASE/1."""
    from keras_saat.cli import main

    def export(models):
        argv = ["export", "--workdir", str(trained_workdir), "--out", str(models / "captioner")]
        assert main([*argv, "--name", "cap"]) == 0

    return made_once(tmp_path_factory, "models", export) / "captioner"


@pytest.fixture(scope="session")
def test_images(shapes_dir):
    """Paths of three test-split images of the small Shapes dataset, the one
    `trained_workdir` trains on."""
    from keras_saat.data import read_karpathy

    return [r.path for r in read_karpathy(shapes_dir / "dataset_shapes.json").split("test")[:3]]


@pytest.fixture(scope="session")
def small_preset(tmp_path_factory):
    """The preset folder of an untrained small captioner (`tests.helpers.small_model`,
    captions of at most 5 words, beam 2): what the `caption` tests run, read-only."""
    from tests.helpers import small_model

    model, _ = small_model(max_length=5, beam_size=2)
    return model.save_to_preset(tmp_path_factory.mktemp("small_preset") / "preset")


@pytest.fixture(scope="session")
def small_export(small_preset, tmp_path_factory):
    """`keras-saat export` of that preset: BASE/1. For tests of the plumbing around a
    SavedModel (arguments, error rows, signatures), which need a working export but not
    one of a model that learned, and so no training run (`trained_workdir`) in
    `pytest -m "not slow"`."""
    from keras_saat.cli import main

    base = tmp_path_factory.mktemp("small_export") / "captioner"
    argv = ["export", "--workdir", str(small_preset), "--out", str(base), "--name", "cap"]
    assert main(argv) == 0
    return base


@pytest.fixture(scope="session")
def tutorial_runs(tmp_path_factory):
    """The tutorial notebooks' shared runs folder, with the demo's model trained into it
    once (`tools/docs.py`'s `train_demo`, which `execute_notebook` then finds there):
    notebooks 3 to 6 show that model."""
    from tools.docs import train_demo

    def demo(out):
        with readers_xla_flags():  # the README's main job, as a newcomer runs it
            train_demo(out / "runs")

    return made_once(tmp_path_factory, "notebooks", demo) / "runs"


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
