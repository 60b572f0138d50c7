"""Which pictures a trained Shapes captioner flags as unlike its training pictures: real
photographs (matplotlib's and scikit-image's sample photos, and crops of them) against
its own world (the test split, fresh scenes, the robustness shifts) and the hand-drawn
scenes packaged with keras_saat; the model's novelty beside the alternatives measured.

    python -m benchmarks.familiarity --workdir /tmp/fam/demo \\
        --out benchmarks/results/familiarity-DATE.json

A workdir without model.keras is trained first (`keras-saat train --config shapes_soft`,
the demo's recipe); one whose model was never calibrated is calibrated from its own
feature cache as `keras-saat train` does at its end (`calibrate_workdir`), so a changed
training world is measured with statistics of that world. "Done when" of the
familiarity work: in-distribution captions flagged <= 2 % of the time, real
photographs >= 90 %.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_report

# scikit-image's bundled sample photographs (skimage/data), and matplotlib's.
SKIMAGE_PHOTOS = (
    "astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
    "motorcycle_right.png", "hubble_deep_field.jpg", "retina.jpg", "camera.png", "coins.png",
    "moon.png", "brick.png", "grass.png", "gravel.png", "page.png", "text.png", "cell.png",
    "microaneurysms.png", "ihc.png",
)  # fmt: skip
MATPLOTLIB_PHOTOS = ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png")
FACES = 10  # grey 25x25 faces of scikit-image's LFW subset, every 20th
# Pictures that are not photographs: drawn, synthetic or a silhouette.
SKIMAGE_GRAPHICS = ("logo.png", "color.png", "horse.png", "clock_motion.png")
CROPS = 4  # random crops of each picture, 35-70 % of its sides, beside the whole picture
SCENES = 1000  # fresh in-distribution scenes
SHIFT_SCENES = 200  # scenes a robustness shift
QUANTILE = 0.99  # the alternatives' thresholds, as the model's own (DEFAULT_QUANTILE)


def keras_saat(*args):
    command = [str(Path(sys.executable).with_name("keras-saat")), *map(str, args)]
    print("$ keras-saat", " ".join(command[1:]), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=sys.stderr)


def read_rgb(path):
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def with_crops(name, pixels, rng):
    """(name, pixels) of the whole picture and CROPS random crops of it."""
    out = [(name, pixels)]
    height, width = pixels.shape[:2]
    for k in range(CROPS):
        share = rng.uniform(0.35, 0.7)
        h, w = max(int(height * share), 8), max(int(width * share), 8)
        y, x = rng.integers(0, height - h + 1), rng.integers(0, width - w + 1)
        out.append((f"{name}#crop{k}", pixels[y : y + h, x : x + w]))
    return out


def sample_pictures():
    """{"real photographs": [(name, pixels)], "other pictures": [...]}, crops included."""
    import matplotlib
    import skimage.data

    folder = Path(skimage.data.__file__).parent
    rng = np.random.default_rng(0)
    photos, graphics = [], []
    for name in SKIMAGE_PHOTOS:
        photos += with_crops(name, read_rgb(folder / name), rng)
    for name in MATPLOTLIB_PHOTOS:
        path = Path(matplotlib.get_data_path()) / "sample_data" / name
        photos += with_crops(name, read_rgb(path), rng)
    faces = np.load(folder / "lfw_subset.npy")
    for index in range(0, 20 * FACES, 20):
        grey = np.clip(np.rint(faces[index] * 255), 0, 255).astype(np.uint8)
        photos += with_crops(f"lfw_subset[{index}]", np.stack([grey] * 3, -1), rng)
    for name in SKIMAGE_GRAPHICS:
        graphics += with_crops(name, read_rgb(folder / name), rng)
    return {"real photographs": photos, "other pictures (graphics)": graphics}


def features_of(model, pictures):
    """(N, L, C) backbone features of (H, W, 3) pictures of any sizes, by the model's
    resize rule (as `generate` sees pixels)."""
    prepare, encode = model.preprocessor(), model.encoder.compiled()
    pixels = np.concatenate([prepare(p) for p in pictures])
    return np.concatenate(
        [np.asarray(encode(pixels[i : i + 64])) for i in range(0, len(pixels), 64)]
    )


def captions_of(model, features):
    """The postprocessed caption dicts (novelty, familiar, log_prob, words) of features,
    decoded as `generate` decodes them (the model's beam)."""
    results = []
    for i in range(0, len(features), 64):
        decoded = model.decode(features[i : i + 64], None, model.beam_size, model.length_penalty)
        results += model.postprocessor(decoded)
    return results


def measured_sets(model, config, workdir):
    """{set name: (kind, names, features)}; kind "familiar" or "unfamiliar"."""
    from keras_saat.data.shapes import HAND_DRAWN, HAND_DRAWN_DIR
    from keras_saat.evaluation.robustness import SHIFTS, render_shifted, robustness_scenes
    from keras_saat.experiment.preparation import load_dataset

    sets = {}
    test = load_dataset(config, workdir, log=lambda _: None).split("test")
    paths = [str(r.path) for r in test]
    sets["Shapes test split"] = ("familiar", paths, features_of(model, map(read_rgb, paths)))
    scenes = robustness_scenes(SCENES, seed=1)
    for shift in SHIFTS:
        count = SCENES if shift.name == "in distribution" else SHIFT_SCENES
        pixels = render_shifted(scenes[:count], shift, 1)
        name = "fresh Shapes scenes" if shift.name == "in distribution" else shift.name
        kind = "familiar" if shift.name == "in distribution" else "shift"
        sets[name] = (kind, [f"{name}#{i}" for i in range(count)], features_of(model, pixels))
    names = sorted(HAND_DRAWN)
    pictures = [read_rgb(HAND_DRAWN_DIR / n) for n in names]
    sets["hand-drawn scenes (keras_saat/data/hand_drawn)"] = (
        "own drawing",
        names,
        features_of(model, pictures),
    )
    for name, pictures in sample_pictures().items():
        kind = "unfamiliar" if name == "real photographs" else "graphics"
        sets[name] = (kind, [n for n, _ in pictures], features_of(model, [p for _, p in pictures]))
    return sets


def log_p_per_word(result):
    """A caption's mean log p per generated token (its words and <end>)."""
    return result["log_prob"] / (len(result["words"]) + 1)


def alternative_scores(model, workdir, config, sets, captions):
    """{alternative: {set: flagged share}} for the signals measured against the model's."""
    from keras_saat.experiment.preparation import extract, load_dataset
    from keras_saat.experiment.workdir_familiarity import split_features
    from keras_saat.layers.feature_familiarity import (
        fit_familiarity,
        pooled_vectors,
        squared_distances,
    )

    dataset = load_dataset(config, workdir, log=lambda _: None)
    source = extract(config, model.encoder, dataset, workdir, lambda _: None)
    train = np.concatenate(list(split_features(model, source, "train", dataset.split("train"))))
    val = np.concatenate(list(split_features(model, source, "val", dataset.split("val"))))
    # (b) the distance alone: the same statistics without the unlike pictures' discriminant
    alone = fit_familiarity(pooled_vectors(train), pooled_vectors(val), QUANTILE)

    def distance_flags(features):
        distances = squared_distances(pooled_vectors(features), alone["mean"], alone["whitening"])
        return distances > alone["threshold"]

    # (a) the caption's mean log p per word, against the val captions' lowest 1 %
    val_lp = np.array([log_p_per_word(r) for r in captions_of(model, val)])
    lp_threshold = float(np.quantile(val_lp, 1 - QUANTILE))
    table = {
        "caption mean log p per word < val 1 % quantile": {},
        "Mahalanobis distance alone (no unlike pictures)": {},
    }
    for name, (_, _, features) in sets.items():
        low_lp = np.array([log_p_per_word(r) < lp_threshold for r in captions[name]])
        table["caption mean log p per word < val 1 % quantile"][name] = float(low_lp.mean())
        table["Mahalanobis distance alone (no unlike pictures)"][name] = float(
            distance_flags(features).mean()
        )
    return table


def markdown(rows):
    lines = ["| pictures | kind | images | flagged |", "|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['set']} | {row['kind']} | {row['images']} | {row['flagged_share']:.1%} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="a trained Shapes workdir")
    parser.add_argument(
        "--recalibrate", action="store_true", help="fit the familiarity again even if fitted"
    )
    parser.add_argument("--out", help="where to write the JSON report")
    args = parser.parse_args(argv)
    if not (args.workdir / "model.keras").exists():
        keras_saat("train", "--config", "shapes_soft", "--workdir", args.workdir)

    from keras_saat.config import load_config
    from keras_saat.experiment.workdir_familiarity import calibrate_workdir
    from keras_saat.models.factories import load_captioner

    config = load_config(args.workdir / "config.yaml")
    model = load_captioner(args.workdir)
    calibration = None
    if args.recalibrate or not model.familiarity_calibrated:
        calibration = calibrate_workdir(args.workdir, config, log=print)
        model = load_captioner(args.workdir)
    sets = measured_sets(model, config, args.workdir)
    captions = {name: captions_of(model, features) for name, (_, _, features) in sets.items()}
    rows = []
    for name, (kind, names, _) in sets.items():
        flagged = [n for n, r in zip(names, captions[name], strict=True) if not r["familiar"]]
        novelty = np.array([r["novelty"] for r in captions[name]])
        rows.append({
            "set": name, "kind": kind, "images": len(names), "flagged": len(flagged),
            "flagged_share": len(flagged) / len(names),
            "novelty_median": float(np.median(novelty)),
            "flagged_names": flagged if kind in ("own drawing",) else flagged[:20],
            "unflagged_names": [n for n in names if n not in set(flagged)][:40]
            if kind in ("unfamiliar", "graphics") else [],
        })  # fmt: skip
    share = {row["set"]: row["flagged_share"] for row in rows}
    familiar = [row for row in rows if row["kind"] == "familiar"]
    fields = {
        "workdir": str(args.workdir),
        "calibration": calibration,
        "signal": "novelty: the larger of the Mahalanobis distance of the signed-square-rooted, "
        "location-mean pooled backbone features from the training images' and their "
        "projection on Fisher's discriminant towards 600 unlike pictures (dead leaves, 1/f "
        "noise), each over its threshold, both at the quantile that keeps 99 % of held-out "
        "training and validation images; flagged = novelty > 1",
        "rows": rows,
        "alternatives": alternative_scores(model, args.workdir, config, sets, captions),
        "table": markdown(rows),
        "done": {
            "in_distribution_at_most_2_percent": all(r["flagged_share"] <= 0.02 for r in familiar),
            "real_photographs_at_least_90_percent": share["real photographs"] >= 0.9,
        },
    }
    print(fields["table"], file=sys.stderr)
    benchmark_report("familiarity.py", fields, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
