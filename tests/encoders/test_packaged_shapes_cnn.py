"""The Shapes CNN packaged with the library: the demo starts from it, it names the objects
of scenes it never saw, a run that asks for another pre-training makes its own, and the
pre-training that makes it (`pretrain_backbone`, tools/package_shapes_cnn.py) writes a
file that loads back as the CNN it trained."""

import dataclasses
import json

import numpy as np
import pytest

from keras_saat import load_config
from keras_saat.config_files import recipe_names, recipe_path
from keras_saat.data import read_karpathy
from keras_saat.data.shapes import page_scene, render, sample_objects
from keras_saat.encoders.packaged_shapes_cnn import (
    WEIGHTS_DIR,
    load_packaged,
    packaged_files,
    sources_digest,
)
from keras_saat.encoders.shapes_cnn import VARIANTS, attribute_accuracy, build_shapes_cnn
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.backbone_pretraining import pretrain_backbone
from keras_saat.experiment.preparation import (
    load_dataset,
    packaged_for,
    prepare_backbone_weights,
)
from keras_saat.images.decoding import load_images
from keras_saat.workdir import BACKBONE_RECORD_FILE, BACKBONE_WEIGHTS_FILE

DEMO = load_config(recipe_path("shapes_soft"))


def quiet(_):
    pass


def with_train(config, **changes):
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **changes))


def with_data(config, **changes):
    return dataclasses.replace(config, data=dataclasses.replace(config.data, **changes))


def test_the_demo_starts_from_the_packaged_cnn_and_other_pretrainings_do_not():
    weights, record = packaged_for(DEMO)
    assert weights == packaged_files("shapes_cnn_small_norm")[0] and weights.is_file()
    assert record["backbone"] == "shapes_cnn_small_norm" and record["pretraining"]["augment"]
    made = record["made"]
    assert made["command"].startswith("python tools/package_shapes_cnn.py") and made["date"]
    model = DEMO.model
    for asks_otherwise in (
        with_train(DEMO, backbone_packaged=False),
        with_train(DEMO, backbone_pretrain_epochs=3),
        with_train(DEMO, backbone_pretrain_scenes=0),
        with_train(DEMO, backbone_pretrain_augment=False),
        dataclasses.replace(DEMO, model=dataclasses.replace(model, seed=1)),
        dataclasses.replace(DEMO, model=dataclasses.replace(model, image_size=96)),
        dataclasses.replace(DEMO, model=dataclasses.replace(model, backbone="shapes_cnn")),
        with_data(DEMO, dataset="karpathy"),  # its scenes are not the world's the record names
        with_data(DEMO, shapes_seed=7),
        with_data(DEMO, shapes_train=50),
        with_data(DEMO, shapes_varied=0.0),
        with_data(DEMO, shapes_varied_copies=True),
        with_data(DEMO, images_dir="elsewhere"),
    ):
        assert packaged_for(asks_otherwise) is None


def test_every_recipe_that_pretrains_a_shapes_cnn_starts_from_a_packaged_one():
    recipes = [load_config(recipe_path(name)) for name in recipe_names()]
    pretraining = [c for c in recipes if c.model.backbone_weights == "shapes"]
    assert len(pretraining) >= 5  # shapes_soft, shapes_hard and the GPU recipes
    for config in pretraining:
        assert packaged_for(config) is not None, config.name


def test_the_packaged_cnns_are_what_this_librarys_code_would_make():
    """The code that renders the world and pre-trains the CNN is the code that made the
    packaged weights; else runs pre-train their own, and the weights are to be made again."""
    records = sorted(WEIGHTS_DIR.glob("*.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text())
        assert record["sources"] == sources_digest(), (
            f"keras_saat's Shapes world or CNN pre-training changed since {path.name} was "
            f"made: run `{record['made']['command']}` and commit what it writes"
        )


@pytest.mark.parametrize("recipe", ["shapes_soft", "shapes_hard"])
def test_the_packaged_cnn_names_the_objects_of_scenes_it_never_saw(recipe):
    """Scenes from a generator of their own, on the world's page and on varied pages under
    uneven light: every attribute head right on at least 90 % of the object locations."""
    config = load_config(recipe_path(recipe))
    weights, record = packaged_for(config)
    _, trainer = load_packaged(config.model.backbone, weights, record)
    rng = np.random.default_rng(2026)
    objects = [sample_objects(rng) for _ in range(60)]
    for draw in (render, page_scene):
        scenes = np.stack([draw(o, rng) for o in objects])
        accuracy = attribute_accuracy(trainer, scenes, objects)
        assert min(accuracy.values()) >= 0.9, (draw.__name__, accuracy)


def test_a_run_takes_the_packaged_cnn_into_its_workdir(shapes_dir, tmp_path):
    """The demo's config and world (rendered here, 2,400 scenes) take it; the same config
    over other training scenes (a small world of another seed) does not."""
    assert packaged_for(DEMO) is not None  # else the call below pre-trains for minutes
    assert packaged_for(DEMO, read_karpathy(shapes_dir / "dataset_shapes.json")) is None
    dataset = load_dataset(DEMO, tmp_path, quiet)
    lines = []
    model = prepare_backbone_weights(DEMO, dataset, tmp_path, lines.append)
    assert model.backbone_weights == str(tmp_path / BACKBONE_WEIGHTS_FILE)
    assert "the Shapes CNN packaged with keras_saat" in lines[0], lines
    accuracy = lines[1].split("val accuracy on object locations: ")[1]
    assert all(float(v.split()[1]) >= 0.9 for v in accuracy.split(", ")), lines
    record = json.loads((tmp_path / BACKBONE_RECORD_FILE).read_text())
    weights, made = packaged_for(DEMO)
    assert record["packaged"]["made"] == made["made"]
    assert record["pretraining"] == made["pretraining"]  # pretraining_difference reads it
    packaged, _ = load_packaged("shapes_cnn_small_norm", weights, made)
    saved = build_shapes_cnn(**VARIANTS["shapes_cnn_small_norm"])
    saved.load_weights(str(tmp_path / BACKBONE_WEIGHTS_FILE))
    scenes = np.random.default_rng(0).uniform(0, 1, (2, 128, 128, 3)).astype("float32")
    np.testing.assert_array_equal(saved(scenes).numpy(), packaged(scenes).numpy())

    # The workdir's record names the scenes and the bytes: a run over another world, or
    # over a damaged file, is refused instead of training on the wrong features.
    assert set(record) >= {"training_scenes", "weights_sha256"}
    lines.clear()
    prepare_backbone_weights(DEMO, dataset, tmp_path, lines.append)
    assert lines[0] == f"using the pre-trained Shapes CNN in {tmp_path / BACKBONE_WEIGHTS_FILE}"
    other_world = read_karpathy(shapes_dir / "dataset_shapes.json")
    with pytest.raises(KerasSaatError, match=r"pre-trained on another Shapes world's scenes"):
        prepare_backbone_weights(DEMO, other_world, tmp_path, quiet)
    damaged = bytearray((tmp_path / BACKBONE_WEIGHTS_FILE).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (tmp_path / BACKBONE_WEIGHTS_FILE).write_bytes(bytes(damaged))
    with pytest.raises(KerasSaatError, match=r"backbone.weights.h5 is damaged: its bytes are not"):
        prepare_backbone_weights(DEMO, dataset, tmp_path, quiet)


def test_damaged_packaged_weights_are_refused(tmp_path):
    weights, record_file = packaged_files("shapes_cnn_small_norm")
    record = json.loads(record_file.read_text())
    damaged = bytearray(weights.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    copy = tmp_path / weights.name
    copy.write_bytes(bytes(damaged))
    with pytest.raises(KerasSaatError, match=r"is damaged: its bytes are not those its record"):
        load_packaged("shapes_cnn_small_norm", copy, record)


def test_a_dataset_without_objects_is_still_refused(shapes_dir, tmp_path):
    index = json.loads((shapes_dir / "dataset_shapes.json").read_text())
    for image in index["images"]:
        image.pop("objects", None)
    (tmp_path / "dataset_plain.json").write_text(json.dumps(index))
    plain = read_karpathy(tmp_path / "dataset_plain.json", images_dir=shapes_dir)
    with pytest.raises(KerasSaatError, match="needs a Shapes dataset"):
        prepare_backbone_weights(DEMO, plain, tmp_path / "run", quiet)


def test_pretraining_writes_a_trainer_file_that_loads_as_the_cnn_it_trained(shapes_dir, tmp_path):
    config = with_train(
        load_config(
            recipe_path("shapes_soft"),
            ["data.dataset=karpathy", f"data.path={shapes_dir / 'dataset_shapes.json'}"],
        ),
        backbone_pretrain_epochs=1,
        backbone_pretrain_scenes=8,
    )
    assert packaged_for(config) is None
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    trainer_file = tmp_path / "cnn.weights.h5"
    cnn, accuracy = pretrain_backbone(config, dataset, trainer_file=trainer_file, log=quiet)
    assert set(accuracy) == {"shape", "colour", "size", "row", "col"}
    record = {"image_size": 128, "seed": 0, "pretraining": {"augment": True}}
    loaded, trainer = load_packaged("shapes_cnn_small_norm", trainer_file, record)
    scenes = np.random.default_rng(0).uniform(0, 1, (2, 128, 128, 3)).astype("float32")
    np.testing.assert_array_equal(loaded(scenes).numpy(), cnn(scenes).numpy())
    val = dataset.split("val")  # the heads were saved too: the accuracy it reported
    images = load_images([r.path for r in val], 128, "crop")
    assert attribute_accuracy(trainer, images, [r.objects for r in val]) == accuracy
