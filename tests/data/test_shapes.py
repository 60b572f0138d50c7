"""The generator against shared/SHAPES.md."""

import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from keras_saat.data import camera, read_karpathy, shapes, write_shapes_dataset


def _what(objects):
    """The objects as their captions name them (a varied view moves only their boxes)."""
    return [{k: v for k, v in o.items() if k != "box"} for o in objects]


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    def digest(out, seed):
        write_shapes_dataset(out, 5, 2, 2, seed=seed)
        files = sorted(out.rglob("*.*"))
        return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()

    assert digest(tmp_path / "a", 1) == digest(tmp_path / "b", 1)
    assert digest(tmp_path / "a", 1) != digest(tmp_path / "c", 2)


def test_dataset_file_follows_the_karpathy_format(shapes_dir):
    content = json.loads((shapes_dir / "dataset_shapes.json").read_text())
    assert content["dataset"] == "shapes"
    image = content["images"][0]
    assert {"filename", "imgid", "split", "sentids", "sentences", "objects"} <= set(image)
    assert len(image["sentences"]) == 5
    assert image["sentences"][0]["tokens"] == image["sentences"][0]["raw"].split()
    for record in content["images"]:
        cells = [tuple(o["cell"]) for o in record["objects"]]
        assert 1 <= len(cells) <= 3 and len(set(cells)) == len(cells)
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    assert dataset.counts() == {"train": 40, "val": 8, "test": 8}
    pixels = np.asarray(Image.open(dataset.records[0].path))
    assert pixels.shape == (128, 128, 3) and pixels.dtype == np.uint8


def test_objects_are_distinct_cells_in_reading_order_with_spec_geometry():
    rng = np.random.default_rng(0)
    counts = set()
    for _ in range(300):
        objects = shapes.sample_objects(rng)
        counts.add(len(objects))
        cells = [tuple(o["cell"]) for o in objects]
        assert cells == sorted(set(cells))
        for o in objects:
            x0, y0, x1, y1 = o["box"]
            r = shapes.SIZES[o["size"]]
            assert x1 - x0 == pytest.approx(2 * r) and y1 - y0 == pytest.approx(2 * r)
            row, col = o["cell"]
            assert abs((x0 + x1) / 2 - (col + 0.5) * 128 / 3) <= 5 + 1e-9
            assert abs((y0 + y1) / 2 - (row + 0.5) * 128 / 3) <= 5 + 1e-9
    assert counts == {1, 2, 3}


def test_rendered_colours_background_and_noise_match_the_spec():
    rng = np.random.default_rng(1)
    objects = [
        {
            "shape": "square",
            "colour": "purple",
            "size": "large",
            "cell": [1, 1],
            "box": [48, 48, 80, 80],
        },
    ]
    image = shapes.render(objects, rng).astype(np.float64)
    inside = image[52:76, 52:76].reshape(-1, 3)
    np.testing.assert_allclose(inside.mean(0), shapes.COLOURS["purple"], atol=1.5)
    assert 6.5 < inside.std(0).mean() < 9.5  # sigma 8 noise
    corner = image[:20, :20].reshape(-1, 3)
    assert (corner.mean(0) >= -2).all() and (corner.mean(0) <= 62).all()


def test_masks_follow_the_shape_definitions():
    def mask(shape):
        return shapes.object_mask({"shape": shape, "box": [40, 40, 72, 72]})

    assert mask("square").sum() == 32 * 32
    assert abs(mask("circle").sum() - np.pi * 16**2) < 40
    assert abs(mask("diamond").sum() - 2 * 16**2) < 40
    assert abs(mask("triangle").sum() - 32 * 32 / 2) < 40
    triangle = mask("triangle")
    assert triangle[70, 41] and triangle[70, 70] and not triangle[42, 41]  # apex up


def test_captions_follow_the_grammar():
    def obj(shape, colour, size, row, col):
        return {"shape": shape, "colour": colour, "size": size, "cell": [row, col]}

    one = [obj("circle", "red", "large", 0, 0)]
    assert shapes.reference_captions(one) == [
        "a red circle at the top left",
        "there is a large red circle at the top left",
        "an image of a red circle at the top left",
        "a picture of a large red circle at the top left",
        "a red circle at the top left",
    ]
    same_row = [obj("square", "blue", "large", 1, 0), obj("triangle", "yellow", "small", 1, 2)]
    assert (
        shapes.caption(same_row, with_size=True)
        == "a large blue square to the left of a small yellow triangle"
    )
    rows = [obj("square", "blue", "large", 0, 2), obj("triangle", "yellow", "small", 1, 0)]
    assert shapes.caption(rows) == "a blue square above a yellow triangle"
    three = [
        obj("diamond", "green", "small", 0, 0),
        obj("circle", "red", "small", 1, 1),
        obj("square", "white", "large", 2, 2),
    ]
    assert shapes.caption(three) == "a green diamond a red circle and a white square"


def test_vocabulary_is_closed_at_31_words(shapes_dir):
    assert len(shapes.vocabulary_words()) == 31
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    used = {w for r in dataset.records for c in r.references for w in c}
    assert used <= set(shapes.vocabulary_words())


def test_varied_training_scenes_keep_the_world_and_change_only_their_pixels(tmp_path):
    """`varied`: the same scenes and captions, val and test untouched, a share of the
    training scenes on another page under other light, and marked so."""
    plain = json.loads(write_shapes_dataset(tmp_path / "plain", 24, 3, 3, seed=4).read_text())
    path = write_shapes_dataset(tmp_path / "varied", 24, 3, 3, seed=4, varied=0.5)
    varied = json.loads(path.read_text())
    # The pages and light are recorded: a file drawn under other ones is not reused.
    pages = {"varied_pages": [*shapes.PAGE_LEVEL, shapes.PAGE_BAND]}
    light = {"varied_light": shapes.LIGHT_FALLOFF, "varied_camera": camera.camera_settings()}
    assert varied["generator"] == {
        "train": 24, "val": 3, "test": 3, "seed": 4, "varied": 0.5, **pages, **light,
    }  # fmt: skip
    assert "varied" not in plain["generator"]  # the world's own file is what it always was
    changed = 0
    for a, b in zip(plain["images"], varied["images"], strict=True):
        assert a["sentences"] == b["sentences"] and _what(a["objects"]) == _what(b["objects"])
        if b.get("photometry") != "varied":
            assert a["objects"] == b["objects"]
        before = np.asarray(Image.open(tmp_path / "plain" / "images" / a["filename"]), float)
        after = np.asarray(Image.open(tmp_path / "varied" / "images" / b["filename"]), float)
        if b.get("photometry") == "varied":
            assert b["split"] == "train" and np.abs(after - before).mean() > 5
            changed += 1
        else:
            np.testing.assert_array_equal(after, before)
    assert 4 <= changed <= 20, changed
    assert len(read_karpathy(path).split("train")) == 24
    with pytest.raises(ValueError, match="varied is a share"):
        write_shapes_dataset(tmp_path / "bad", 2, 1, 1, varied=1.5)


def test_varied_copies_add_a_second_view_beside_each_world_scene(tmp_path):
    """`varied_copies`: the world's images all stay as they are, and each varied view is a
    training image of its own after them, with its scene's objects and captions."""
    plain = json.loads(write_shapes_dataset(tmp_path / "plain", 12, 2, 2, seed=4).read_text())
    path = write_shapes_dataset(
        tmp_path / "copies", 12, 2, 2, seed=4, varied=1.0, varied_copies=True
    )
    copies = json.loads(path.read_text())
    assert copies["generator"] == {
        "train": 12, "val": 2, "test": 2, "seed": 4, "varied": 1.0, "varied_copies": True,
        "varied_pages": [*shapes.PAGE_LEVEL, shapes.PAGE_BAND],
        "varied_light": shapes.LIGHT_FALLOFF,
        "varied_camera": camera.camera_settings(),
    }  # fmt: skip
    world, added = copies["images"][:16], copies["images"][16:]
    for a, b in zip(plain["images"], world, strict=True):
        assert a == b  # the same records, the same pixels
        np.testing.assert_array_equal(
            np.asarray(Image.open(tmp_path / "copies" / "images" / b["filename"])),
            np.asarray(Image.open(tmp_path / "plain" / "images" / a["filename"])),
        )
    assert len(added) == 12 and all(r["photometry"] == "varied" for r in added)
    for original, view in zip(world[:12], added, strict=True):
        assert view["split"] == "train" and _what(view["objects"]) == _what(original["objects"])
        assert [s["raw"] for s in view["sentences"]] == [s["raw"] for s in original["sentences"]]
        pixels = np.asarray(Image.open(tmp_path / "copies" / "images" / view["filename"]), float)
        first = np.asarray(Image.open(tmp_path / "copies" / "images" / original["filename"]), float)
        assert np.abs(pixels - first).mean() > 5
    sentids = [s["sentid"] for r in copies["images"] for s in r["sentences"]]
    assert sentids == list(range(len(sentids)))
    assert len(read_karpathy(path).split("train")) == 24
