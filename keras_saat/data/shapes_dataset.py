"""A Shapes dataset on disk: the world's scenes (`keras_saat.data.shapes`) written as PNG
files and a Karpathy-format JSON, part of the training scenes drawn as varied views
(`keras_saat.data.camera.varied_view`)."""

import json
from pathlib import Path

import numpy as np
from PIL import Image

from keras_saat.data.camera import camera_settings, varied_view
from keras_saat.data.shapes import page_settings, reference_captions, render, sample_objects
from keras_saat.io_utils import write_text_atomic

DATASET_FILE = "dataset_shapes.json"  # what write_shapes_dataset writes, in Karpathy format


def write_shapes_dataset(
    out_dir, train=2000, val=200, test=200, seed=0, log=None, varied=0.0, varied_copies=False
):
    """Generates a Shapes dataset in the Karpathy split format.

    Writes `out_dir/dataset_shapes.json` and `out_dir/images/NNNNNN.png`; the same seed
    and counts give byte-identical files.

    With `varied` > 0, that share of the training scenes is drawn as a varied view
    (`varied_view`: a page under uneven light, or a sheet drawn by hand or photographed)
    through `keras_saat.images.photometry.photometric_augmentation` (exposure, contrast,
    hue, saturation), marked `"photometry": "varied"` in the JSON with the objects' boxes
    where the view puts them. The scenes, captions, val and test images are those of
    `varied` 0 (the varied draws use a stream of their own).

    Args:
        out_dir: str or Path. Output folder (created).
        train: int. Training images. Defaults to 2000.
        val: int. Validation images. Defaults to 200.
        test: int. Test images. Defaults to 200.
        seed: int. Generator seed. Defaults to 0.
        log: callable or None. Receives progress lines. Defaults to None.
        varied: float. Share of the training scenes drawn under varied photometry, in
            [0, 1]. Defaults to 0 (the world's own photometry).
        varied_copies: bool. Keep each varied scene's own image in its place and add the
            varied view after the test split, a training image with the same captions,
            rather than drawing the scene varied in its place. Defaults to False.

    Returns:
        Path of the dataset JSON file.
    """
    if not 0.0 <= varied <= 1.0:
        raise ValueError(f"varied is a share of the training scenes, in [0, 1]; got {varied}")
    out_dir = Path(out_dir)
    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    varied_rng = np.random.default_rng([seed, 3])  # the world's own stream stays as it was
    pending = []  # (position in images, pixels, objects as the view shows them) of varied scenes
    splits = ["train"] * train + ["val"] * val + ["test"] * test
    images = []
    sentid = 0
    for imgid, split in enumerate(splits):
        objects = sample_objects(rng)
        pixels = render(objects, rng)
        filename = f"{imgid:06d}.png"
        seen = None
        if split == "train" and varied and varied_rng.random() < varied:
            view, seen = varied_view(objects, varied_rng)
            pending.append((imgid, view, seen))
        if seen is None or varied_copies:
            _write_png(image_dir / filename, pixels)
        in_file = objects if varied_copies or seen is None else seen
        images.append(_image_record(imgid, filename, split, in_file, sentid))
        sentid += len(images[-1]["sentences"])
        if log and (imgid + 1) % 500 == 0:
            log(f"  rendered {imgid + 1}/{len(splits)} images")
    if varied_copies:  # each varied view becomes a training image of its own, at the end
        copies = []
        for _, view, seen in pending:
            copy = len(splits) + len(copies)
            record = _image_record(copy, f"{copy:06d}.png", "train", seen, sentid)
            sentid += len(record["sentences"])
            images.append(record)
            copies.append((copy, view, seen))
        pending = copies
    if pending:
        from keras_saat.images.photometry import augmented_uint8

        if log:
            log(f"  {len(pending)} training scenes drawn as varied views (pages, sheets, photos)")
        positions, pixels, _ = zip(*pending, strict=True)
        for imgid, view in zip(positions, augmented_uint8(np.stack(pixels), seed), strict=True):
            images[imgid]["photometry"] = "varied"
            _write_png(image_dir / images[imgid]["filename"], view)
    path = out_dir / DATASET_FILE
    # filepath is relative to the JSON file's folder, as in Karpathy's COCO file. Written
    # last and atomically: a run killed before this point leaves no dataset to reuse.
    settings = generator_settings(train, val, test, seed, varied, varied_copies)
    write_text_atomic(
        path, json.dumps({"dataset": "shapes", "generator": settings, "images": images})
    )
    return path


def generator_settings(train, val, test, seed, varied=0.0, varied_copies=False):
    """What `write_shapes_dataset` was asked for, as stored in (and compared with) its JSON
    (`varied` only when it is not 0, and `varied_copies` only when it is set and counts, so
    a world's file is what it always was)."""
    settings = {"train": int(train), "val": int(val), "test": int(test), "seed": int(seed)}
    if varied:
        settings["varied"] = float(varied)
        settings.update({f"varied_{k}": v for k, v in page_settings().items()})
        settings["varied_camera"] = camera_settings()
        if varied_copies:
            settings["varied_copies"] = True
    return settings


def _image_record(imgid, filename, split, objects, first_sentid):
    """One image's entry in the Karpathy-format JSON, its sentences numbered from `first_sentid`."""
    sentences = [
        {"tokens": raw.split(), "raw": raw, "imgid": imgid, "sentid": first_sentid + k}
        for k, raw in enumerate(reference_captions(objects))
    ]
    return {
        "filepath": "images",
        "filename": filename,
        "imgid": imgid,
        "split": split,
        "sentids": [s["sentid"] for s in sentences],
        "sentences": sentences,
        "objects": objects,
    }


def _write_png(path, pixels):
    # zlib's fastest level: a noisy scene compresses little at any level.
    Image.fromarray(pixels).save(path, format="PNG", compress_level=1)


def describe_generator_settings(settings):
    """`generator_settings` in words, for a log line or an error."""
    varied = settings.get("varied")
    counts = f"{settings['train']}/{settings['val']}/{settings['test']}"
    text = f"{counts} images, seed {settings['seed']}"
    if not varied:
        return text
    text += f", {varied:g} of the training scenes varied"
    if settings.get("varied_copies"):
        text += " (as added copies)"
    pages, light = settings.get("varied_pages"), settings.get("varied_light")
    if pages is None or light is None:
        return text + " (pages and light not recorded)"
    low, high, band = pages
    return f"{text} (pages {low}-{high + band}; light falling off by up to {light:g})"


def stored_generator_settings(path):
    """The generator settings a Shapes dataset file records (None when it records none)."""
    with open(path, encoding="utf-8") as file:
        try:
            return json.load(file).get("generator")
        except ValueError:
            return None  # not JSON: the reader that follows names the problem
