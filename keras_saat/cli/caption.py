"""`keras-saat caption`: caption images, folders or globs; --out writes JSON lines or CSV
(`caption_files`), --plot the paper's Figure 2; with --runner, a Beam pipeline over a
SavedModel (`caption_runner`)."""

import contextlib
import sys
from pathlib import Path

from keras_saat.cli.checks import check_trained
from keras_saat.cli.flags import (
    batch_size_argument,
    beam_size_argument,
    command,
    log,
    max_length_argument,
    max_pixels_argument,
    runner_group,
    trained,
    trained_model_arguments,
)
from keras_saat.errors import KerasSaatError

INTERRUPTED = "the rows written to --out are kept; the same command captions the rest"


def add_parser(sub):
    p = command(
        sub,
        "caption",
        "caption images, folders or globs; --out writes JSON lines or CSV",
        (
            "keras-saat caption --workdir runs/shapes_soft photo.png",
            "keras-saat caption --workdir checkpoints/best.keras photo.png --max-pixels 100000000",
            "keras-saat caption --workdir runs/shapes_soft photos/ --out captions.jsonl",
            "keras-saat caption --preset presets/shapes_soft 'photos/**/*.jpg' --out captions.csv",
            "keras-saat caption --workdir runs/shapes_soft photos/ --plot attention.png",
            "keras-saat caption --saved-model models/cap photos/ --out captions/ --runner local",
            "keras-saat caption --saved-model models/cap photos/ --out captions/ --runner local "
            "-- --direct_num_workers=2 --direct_running_mode=multi_processing",
        ),
    )
    trained_model_arguments(p, saved_model=True)
    p.add_argument(
        "images",
        nargs="+",
        metavar="PATH",
        help="image files (JPEG, PNG, GIF, BMP), folders (searched recursively) or globs",
    )
    p.add_argument(
        "--out",
        metavar="FILE.jsonl|FILE.csv",
        help="write one row per image (image, caption, log_prob, novelty, familiar, error); "
        "a second run skips the images already captioned there",
    )
    batch_size_argument(p, "images per batch (default: decode.batch_size)")
    beam_size_argument(p, "the model's; 1 = greedy")
    max_length_argument(p)
    max_pixels_argument(p, "the model's export.max_pixels")
    p.add_argument(
        "--attention",
        action="store_true",
        help="add each word's attention grid to the rows (JSON lines only)",
    )
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="write the paper's Figure 2 layout: OUT.png for one image, OUT_<image name>.png "
        "for each of several",
    )
    group = runner_group(
        p,
        runner_help="run as a Beam pipeline: local (this machine), direct, prism, dataflow, "
        "flink or spark; --out is then a folder of shard files",
        large_model_help="with --runner: one model copy per machine, shared by its worker processes",
    )
    group.add_argument(
        "--shard-size",
        type=int,
        default=500,
        help="with --runner: images per output file, the unit a rerun skips (default 500)",
    )
    return p


def check(args):
    """Checks the trained model, --max-pixels, the images (into `args.paths`), --out and
    --plot."""
    if getattr(args, "runner", None):
        from keras_saat.cli.caption_runner import check_caption_run

        check_caption_run(args)
        return
    from keras_saat.cli.caption_files import CaptionFile
    from keras_saat.images.image_files import find_images

    if getattr(args, "saved_model", None):
        raise KerasSaatError("--saved-model runs in a Beam pipeline: add --runner local")
    check_trained(args, overrides(args))
    if args.out:
        CaptionFile.check(args.out, attention=args.attention)
    elif args.attention:
        raise KerasSaatError("--attention writes the grids into --out FILE.jsonl; give --out")
    if args.plot and not Path(args.plot).parent.is_dir():
        raise KerasSaatError(
            f"--plot {args.plot}: the folder {Path(args.plot).parent} does not exist; create it first"
        )
    paths = find_images(args.images)
    missing = [p for p in paths if not Path(p).exists()]
    if len(missing) == len(paths):  # nothing to caption: a mistyped name, say
        others = len(missing) - 1
        raise KerasSaatError(
            f"{missing[0]}: no such file"
            + (f" (nor the {others} other path{'s' if others > 1 else ''} given)" if others else "")
        )
    # Some exist: the run captions them and reports each missing one, once, as an error row.
    args.paths = paths


def overrides(args):
    """--max-pixels as the config override it stands for."""
    return [] if args.max_pixels is None else [f"export.max_pixels={args.max_pixels}"]


def run(args):
    if getattr(args, "runner", None):
        from keras_saat.cli.caption_runner import cmd_caption_run

        cmd_caption_run(args, log)
        return
    from keras_saat.experiment.trained_models import trained_model

    paths, out = args.paths, None
    if args.out:
        from keras_saat.cli.caption_files import CaptionFile

        out = CaptionFile(args.out, attention=args.attention)
        if out.done:
            log(f"{args.out}: {len(out.done)} images already captioned, skipping them")
    todo = [p for p in paths if out is None or str(p) not in out.done]
    # The config's export.max_pixels (or --max-pixels), as its SavedModel would refuse.
    model, config, _ = trained_model(trained(args), overrides(args))
    plots = _Plots(model, args.plot, paths) if args.plot else None
    progress = None
    if sys.stderr.isatty():
        import keras

        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the captions
            progress = keras.utils.Progbar(len(todo), unit_name="image")
    failed = 0
    try:
        stream = model.generate_stream(
            todo,
            batch_size=args.batch_size or config.decode.batch_size,
            beam_size=args.beam_size,
            max_length=args.max_length,
        )
        for result in stream:
            result["error"] = with_flag(result["error"])
            if out is not None:
                out.write(result)
            if result["error"]:
                failed += 1
                print(f"keras-saat: {result['image']}: {result['error']}", file=sys.stderr)
            elif out is None:
                log(f"{result['image']}: {result['caption']}{unfamiliar_note(result)}")
            if plots is not None and not result["error"]:
                plots.save(result)
            if progress is not None:
                with contextlib.redirect_stdout(sys.stderr):
                    progress.add(1)
    finally:
        if out is not None:
            out.close()
    if out is not None:
        log(f"wrote {len(todo) - failed} captions to {args.out}")
    if failed:
        raise KerasSaatError(
            f"{failed} of {len(todo)} images could not be captioned"
            + (" (their rows carry the error; run again to retry them)" if out else "")
        )


def unfamiliar_note(result):
    """What a printed caption adds when its picture is unlike the training pictures."""
    if result.get("familiar", True):
        return ""
    return f"  [unlike the training pictures: novelty {result['novelty']:.1f}]"


# How images/header_checks.py refuses an image over the limit, and the flag that raises it.
LIMIT_SETTING = " (export.max_pixels); "
LIMIT_FLAG = " (export.max_pixels); raise it with --max-pixels N, or "


def with_flag(error):
    """An image's error, naming --max-pixels where the image is over the limit."""
    return error.replace(LIMIT_SETTING, LIMIT_FLAG) if error else error


class _Plots:
    """`caption --plot OUT.png`: one figure per image, named after it (`plot_names`)."""

    def __init__(self, model, plot, paths):
        from keras_saat.evaluation.plots import AttentionPlotter

        self.preprocess = model.preprocessor()
        self.names = plot_names(plot, paths)
        self.plotter = AttentionPlotter()

    def save(self, result):
        path = self.names[result["image"]]
        # What the model saw (the attention's frame), decoded from the file's bytes: the
        # preprocessor's path input builds a tf.data pipeline per call, seconds an image.
        pixels = self.preprocess(Path(result["image"]).read_bytes())[0]
        self.plotter.save(pixels, result["words"], result["attention"], path)
        log(f"  attention plot: {path}")


def plot_names(plot, paths):
    """{str(image path): its figure's Path}: `plot` (OUT.png) for one image; OUT_<image
    stem>.png for several, with _2, _3, ... after a stem an earlier image has."""
    plot = Path(plot)
    if len(paths) == 1:
        return {str(paths[0]): plot}
    suffix = plot.suffix or ".png"
    names, used = {}, set()
    for image in paths:
        base = f"{plot.stem}_{Path(image).stem}"
        name, count = base, 1
        while name in used:
            count += 1
            name = f"{base}_{count}"
        used.add(name)
        names[str(image)] = plot.with_name(name + suffix)
    return names
