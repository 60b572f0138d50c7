import pytest
import yaml

from keras_saat.cli import main
from keras_saat.data import read_karpathy
from tests.helpers import DEFAULTS


@pytest.fixture(scope="session")
def trained_workdir(shapes_dir, tmp_path_factory):
    """A captioner trained for 4 epochs on the small Shapes dataset, through the CLI.

    Its captions are real words (one epoch only ever says <end>).
    """
    workdir = tmp_path_factory.mktemp("serving") / "run"
    argv = ["train", "--config", DEFAULTS, "--workdir", str(workdir)]
    for setting in (
        "data.dataset=karpathy",
        f"data.path={shapes_dir / 'dataset_shapes.json'}",
        "train.epochs=4",
        "train.learning_rate=0.005",
        "train.batch_size=16",
        "decode.max_length=8",
    ):
        argv += ["--set", setting]
    assert main(argv) == 0
    return workdir


@pytest.fixture(scope="session")
def export_base(trained_workdir):
    """`keras-saat export` of that model: BASE/1."""
    base = trained_workdir.parent / "models" / "captioner"
    assert (
        main(["export", "--workdir", str(trained_workdir), "--out", str(base), "--name", "cap"])
        == 0
    )
    return base


@pytest.fixture(scope="session")
def test_images(trained_workdir):
    """Paths of three test-split Shapes images of that dataset."""
    config = yaml.safe_load((trained_workdir / "config.yaml").read_text())
    return [record.path for record in read_karpathy(config["data"]["path"]).split("test")[:3]]
