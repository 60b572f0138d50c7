"""Makes the pre-trained Shapes CNN packaged with keras_saat (keras_saat/encoders/weights):
the recipe's Shapes world rendered into a scratch folder, its CNN pre-trained there as a
run of the recipe would pre-train it, the pre-training model's weights and a record of
how they were made written beside the package's code.

    python tools/package_shapes_cnn.py                     # the demo's: shapes_soft
    python tools/package_shapes_cnn.py --recipe shapes_hard

A run of a config whose Shapes CNN, pre-training settings, seed and image size equal the
record's starts from the packaged weights (`train.backbone_packaged`). The demo's takes
the recipe's whole pre-training (docs/performance.md, "Robustness", says what it costs).
"""

import argparse
import dataclasses
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine():
    """The CPU's model name (from /proc/cpuinfo) and cores, or the platform's."""
    import os

    try:
        with open("/proc/cpuinfo") as info:
            names = [
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            ]
    except OSError:
        names = []
    return f"{names[0]}, {len(os.sched_getaffinity(0))} cores" if names else platform.machine()


def commit():
    """HEAD's commit, with "+changes" when the library's tracked files (the packaged
    weights aside) differ from it."""
    run = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)  # noqa: E731
    head = run("rev-parse", "--short=7", "HEAD").stdout.strip()
    library = ["--", "keras_saat", ":!keras_saat/encoders/weights"]
    changed = run("status", "--porcelain", "--untracked-files=no", *library).stdout.strip()
    return f"{head}+changes" if changed else head


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="shapes_soft", help="a packaged recipe's name")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from keras_saat import load_config
    from keras_saat.config_files import recipe_path
    from keras_saat.encoders.packaged_shapes_cnn import (
        WEIGHTS_DIR,
        packaged_files,
        sources_digest,
        world_record,
    )
    from keras_saat.experiment.backbone_pretraining import (
        image_size_of,
        pretrain_backbone,
        pretraining_record,
        training_scenes_digest,
    )
    from keras_saat.experiment.preparation import load_dataset
    from keras_saat.io_utils import file_sha256

    config = load_config(recipe_path(args.recipe))
    config = dataclasses.replace(
        config, train=dataclasses.replace(config.train, backbone_packaged=False)
    )
    model, data, train = config.model, config.data, config.train
    if model.backbone_weights != "shapes" or data.dataset != "shapes":
        raise SystemExit(f"{args.recipe} does not pre-train a Shapes CNN on the Shapes world")
    WEIGHTS_DIR.mkdir(exist_ok=True)
    weights, record_file = packaged_files(model.backbone)
    with tempfile.TemporaryDirectory() as workdir:
        dataset = load_dataset(config, workdir)
        _, accuracy = pretrain_backbone(config, dataset, trainer_file=weights)
    record = {
        "backbone": model.backbone,
        "pretraining": pretraining_record(train),
        "seed": model.seed,
        "image_size": image_size_of(model),
        "world": world_record(data),
        "scenes": len(dataset.split("train")) + train.backbone_pretrain_scenes,
        "training_scenes": training_scenes_digest(dataset),
        "sources": sources_digest(),
        "val_accuracy": {k: round(v, 4) for k, v in accuracy.items()},
        "weights_sha256": file_sha256(weights),  # checked at load
        "made": {
            "command": f"python tools/package_shapes_cnn.py --recipe {args.recipe}",
            "commit": commit(),
            "machine": machine(),
            "date": datetime.date.today().isoformat(),
        },
    }
    record_file.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {weights.relative_to(ROOT)} and {record_file.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
