"""What each `keras-saat` command does, once `keras_saat.cli` has parsed its arguments.

Each command has a `check_*` and a `cmd_*`. The check runs first and never imports
TensorFlow: it loads the config (unknown keys, bad values, registry names), and checks
the input paths and the trained model's folder, so a mistake is answered at once; what
it resolves it leaves on `args` for the command. Each `cmd_*` imports what it needs when
it runs, calls the library and prints the result.
"""

import sys
import time
from pathlib import Path

from keras_saat.errors import KerasSaatError

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def _log(message):
    print(message, flush=True)


def cmd_make_shapes(args):
    from keras_saat.data.shapes import write_shapes_dataset

    start = time.perf_counter()
    path = write_shapes_dataset(args.out, args.train, args.val, args.test, args.seed, _log)
    _log(
        f"wrote {args.train + args.val + args.test} images and {path} in {time.perf_counter() - start:.1f}s"
    )


def check_make_shapes(args):
    """`make-shapes`: --out is a folder (or not there yet)."""
    _check_folder_argument("--out", args.out)


def check_experiment(args):
    """`train`, `extract-features` and `demo`: the config (file or recipe, keys, values,
    registry names), the files its dataset reader opens, a backbone weights file, and a
    --workdir that is a folder. The config goes to `args.experiment`."""
    from keras_saat.config import load_config
    from keras_saat.data.reader_registry import check_inputs

    config = _with_strict(load_config(getattr(args, "config", None) or DEMO_RECIPE, args.set), args)
    check_inputs(config.data)
    weights = config.model.backbone_weights
    # "imagenet" and "shapes" name weights the run makes or fetches; anything else is a file.
    if weights not in (None, "imagenet", "shapes") and not Path(weights).is_file():
        raise KerasSaatError(f"backbone weights file not found: {weights} (model.backbone_weights)")
    _check_folder_argument("--workdir", args.workdir)
    args.experiment = config
    from keras_saat.beam.extraction_command import check_extract_run, check_no_runner_flags

    if getattr(args, "runner", None):
        check_extract_run(args)
    else:
        check_no_runner_flags(args)


def _check_folder_argument(flag, path):
    if Path(path).exists() and not Path(path).is_dir():
        raise KerasSaatError(f"{flag} {path} is a file; give a folder")


def check_trained(args):
    """`evaluate`, `caption`, `export` and `serve`: --workdir holds a config and a trained
    model, or --preset is a preset folder; --set overrides fit the saved config."""
    from keras_saat.config import load_config
    from keras_saat.models.preset import is_preset
    from keras_saat.workdir import CONFIG_FILE, MODEL_FILE

    path = Path(_trained(args))
    if is_preset(path):
        load_config(None, _overrides(args))
        return
    if args.preset:
        raise KerasSaatError(
            f"--preset {path}: {'no such folder' if not path.is_dir() else 'not a preset folder'} "
            "(a preset holds config.json and model.weights.h5); write one with "
            "`keras-saat export --format preset`"
        )
    if not path.is_dir():
        raise KerasSaatError(f"--workdir {path}: no such folder; train a model there first")
    if not (path / CONFIG_FILE).is_file():
        raise KerasSaatError(
            f"{path} is neither a workdir (no {CONFIG_FILE}) nor a preset folder; "
            "train a model there first, or give a preset written by `keras-saat export --format preset`"
        )
    if not (path / MODEL_FILE).is_file():
        raise KerasSaatError(
            f"{path} has no {MODEL_FILE}: training saves it after its first epoch; "
            f"run `keras-saat train` with this --workdir until it has"
        )
    load_config(path / CONFIG_FILE, _overrides(args))


def _overrides(args):
    """The command's config overrides: --set, and `export`'s flags as overrides."""
    flags = (
        (
            ("decode.beam_size", getattr(args, "beam_size", None)),
            ("decode.max_length", getattr(args, "max_length", None)),
            ("export.max_pixels", getattr(args, "max_pixels", None)),
            ("export.model_name", args.name),
            ("export.format", args.format),
            ("export.precision", args.precision),
            ("export.quantize", args.quantize),
        )
        if args.func is cmd_export
        else ()
    )
    return [
        *getattr(args, "set", ()),
        *(f"{key}={value}" for key, value in flags if value is not None),
    ]


def check_caption(args):
    """`caption`: the trained model, the images (folders and patterns that match, named
    files that exist), --out and --plot. The image paths go to `args.paths`."""
    if getattr(args, "runner", None):
        from keras_saat.beam.caption_command import check_caption_run

        check_caption_run(args)
        return
    from keras_saat.caption_files import CaptionFile
    from keras_saat.data.image_files import find_images

    if getattr(args, "saved_model", None):
        raise KerasSaatError("--saved-model runs in a Beam pipeline: add --runner local")
    check_trained(args)
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
        raise KerasSaatError(
            f"{missing[0]}: no such file"
            + (f" (nor the {len(missing) - 1} other paths given)" if len(missing) > 1 else "")
        )
    for path in missing:  # the others are captioned; these become error rows too
        print(f"keras-saat: {path}: no such file", file=sys.stderr)
    args.paths = paths


def check_export(args):
    """`export`: the trained model, and the flags and --set as overrides of its config."""
    check_trained(args)


def check_serve(args):
    """`serve`: a model base folder, or a trained model to export."""
    if args.model_base is not None:
        if not Path(args.model_base).is_dir():
            raise KerasSaatError(
                f"--model-base {args.model_base}: no such folder; write one with `keras-saat export`"
            )
        return
    check_trained(args)


def check_bench(args):
    """`bench`: the --part names."""
    from keras_saat.bench import PARTS

    for name in args.part:
        PARTS.get(name)  # an unknown part names the nearest one
    if args.images is not None and not 1 <= args.images <= 100_000_000:
        raise KerasSaatError(f"--images {args.images}: give a count from 1 to 100000000")


def cmd_train(args):
    from keras_saat.experiment import train

    result = train(args.experiment, args.workdir, _log)
    _print_result(result)


def cmd_extract_features(args):
    if getattr(args, "runner", None):
        from keras_saat.beam.extraction_command import cmd_extract_run

        cache = cmd_extract_run(args, _log)
    else:
        from keras_saat.experiment import extract_only

        cache = extract_only(args.experiment, args.workdir, _log)
    counts = ", ".join(f"{cache.count(s)} {s}" for s in cache.index["splits"])
    _log(
        f"feature cache {cache.directory}: {counts} images, grid {cache.grid_shape}, {cache.channels} channels"
    )


def _with_strict(config, args):
    import dataclasses

    if getattr(args, "strict", False):
        return dataclasses.replace(config, data=dataclasses.replace(config.data, strict=True))
    return config


def cmd_demo(args):
    from keras_saat.experiment import train

    config = args.experiment
    _log(f"keras-saat demo: Show, Attend and Tell on the Shapes world, workdir {args.workdir}")
    result = train(config, args.workdir, _log)
    _log("\ntest captions (generated | a reference):")
    for record, caption in list(zip(result["records"], result["captions"], strict=True))[
        : args.show
    ]:
        _log(f"  {record.path.name}: {caption}\n  {'':>10}  | {record.captions[1]}")
    _print_result(result)


METRIC_LABELS = (
    ("bleu_1", "BLEU-1"),
    ("bleu_2", "BLEU-2"),
    ("bleu_3", "BLEU-3"),
    ("bleu_4", "BLEU-4"),
    ("meteor", "METEOR"),
    ("rouge_l", "ROUGE-L"),
    ("cider", "CIDEr"),
)


def format_metrics(metrics):
    """'BLEU-1 94.6  ...  CIDEr 812.3' on the 0-100 scale (the metrics present)."""
    return "  ".join(
        f"{label} {100 * metrics[key]:.1f}" for key, label in METRIC_LABELS if key in metrics
    )


def _print_scores(result):
    _log(f"\n{result.get('split', 'test')} scores x100 ({result['method']}):")
    _log(f"  {format_metrics(result['metrics'])}")
    where = result.get("localisation")
    if where and where["hit_rate"] is not None:
        _log(
            f"  attention localisation: {100 * where['hit_rate']:.1f}% of {where['words']} colour/shape "
            f"words attend inside their object (chance {100 * where['chance']:.1f}%)"
        )


def _print_result(result):
    if not result.get("chief", True):
        _log("training done (this worker is not the chief; the chief writes the model and scores)")
        return
    _print_scores(result)
    _log(
        f"decoder training {result['train_seconds']:.0f}s, total {result['total_seconds']:.0f}s; "
        f"best epoch {result['best_epoch']}"
    )


def cmd_evaluate(args):
    from keras_saat.experiment import evaluate
    from keras_saat.workdir import METRICS_FILE, PREDICTIONS_FILE

    result = evaluate(_trained(args), args.split, args.beam_size, _log, args.set, out=args.out)
    _print_scores(result)
    _log(f"wrote {result['out'] / PREDICTIONS_FILE} and {METRICS_FILE}")


def _trained(args):
    """The trained model's folder: --workdir or --preset."""
    return args.workdir or args.preset


def cmd_caption(args):
    if getattr(args, "runner", None):
        from keras_saat.beam.caption_command import cmd_caption_run

        cmd_caption_run(args, _log)
        return
    from keras_saat.experiment.trained_models import trained_model

    paths, out = args.paths, None
    if args.out:
        from keras_saat.caption_files import CaptionFile

        out = CaptionFile(args.out, attention=args.attention)
        if out.done:
            _log(f"{args.out}: {len(out.done)} images already captioned, skipping them")
    todo = [p for p in paths if out is None or str(p) not in out.done]
    model, config, _ = trained_model(_trained(args))  # its export.max_pixels, as exported
    plots = _Plots(model, args.plot, paths) if args.plot else None
    progress = _Progress(len(todo)) if sys.stderr.isatty() else None
    failed = 0
    try:
        stream = model.generate_stream(
            todo,
            batch_size=args.batch_size or config.decode.batch_size,
            beam_size=args.beam_size,
            max_length=args.max_length,
        )
        for result in stream:
            if out is not None:
                out.write(result)
            if result["error"]:
                failed += 1
                print(f"keras-saat: {result['image']}: {result['error']}", file=sys.stderr)
            elif out is None:
                _log(f"{result['image']}: {result['caption']}")
            if plots is not None and not result["error"]:
                plots.save(result)
            if progress is not None:
                progress.update(1)
    finally:
        if out is not None:
            out.close()
        if progress is not None:
            progress.close()
    if out is not None:
        _log(f"wrote {len(todo) - failed} captions to {args.out}")
    if failed:
        raise KerasSaatError(
            f"{failed} of {len(todo)} images could not be captioned"
            + (" (their rows carry the error; run again to retry them)" if out else "")
        )


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
        _log(f"  attention plot: {path}")


def plot_names(plot, paths):
    """Each image's figure: OUT.png for one image; OUT_<image stem>.png for several, with
    _2, _3, ... after a stem that an earlier image has (photos/a.png, more/a.jpg).

    Args:
        plot: str or Path. The --plot file name.
        paths: list of Path. The images, in order.

    Returns:
        dict: str(image path) -> Path.
    """
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


class _Progress:
    """'captioned N/M images, X images/s' on one terminal line (stderr)."""

    def __init__(self, total):
        self.total, self.count, self.start, self.shown = total, 0, time.perf_counter(), 0.0

    def update(self, n):
        self.count += n
        now = time.perf_counter()
        if now - self.shown < 0.5 and self.count < self.total:
            return
        self.shown = now
        rate = self.count / max(now - self.start, 1e-9)
        print(
            f"\rcaptioned {self.count}/{self.total} images, {rate:.1f} images/s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self):
        if self.count:
            print(file=sys.stderr)


def cmd_export(args):
    import json

    from keras_saat.experiment import export_workdir
    from keras_saat.serving.saved_model import METADATA_FILE

    # Each flag is a config override: the workdir's config.yaml is the one source.
    path = export_workdir(_trained(args), args.out, args.version, _overrides(args), log=_log)
    metadata = path / "assets.extra" / METADATA_FILE
    if metadata.is_file():  # a SavedModel version folder
        name = json.loads(metadata.read_text())["model_name"]
        _log(
            f"serve it with TF Serving (see export/README.md), or for development:\n"
            f"  keras-saat serve --model-base {path.parent} --name {name}"
        )


def cmd_serve(args):
    import signal
    import tempfile
    import threading

    from keras_saat.serving.dev_server import DevServer

    # SIGTERM (docker stop, systemd, kill) unwinds like Ctrl-C: the scratch export goes.
    signal.signal(signal.SIGTERM, _interrupt)
    model_base, scratch = args.model_base, None
    if model_base is None:  # a workdir or preset: export it into a scratch model base first
        from keras_saat.experiment import export_workdir

        scratch = tempfile.TemporaryDirectory(prefix="keras-saat-serve-")
        model_base = f"{scratch.name}/{args.name}"
        overrides = [f"export.model_name={args.name}", "export.format=savedmodel"]
        export_workdir(_trained(args), model_base, 1, overrides, log=_log)
    try:
        server = DevServer(
            model_base,
            args.name,
            host=args.host,
            port=args.port,
            grpc_port=args.grpc_port,
            version=args.version,
            log=_log,
            max_batch=args.max_batch,
            max_connections=args.max_connections,
            read_timeout=args.read_timeout,
        ).start()
        _log(
            f"serving {server.name} version {server.version} from {server.path}\n"
            f"  REST {server.url}/v1/models/{server.name}"
            + (f"\n  gRPC {server.host}:{server.grpc_port}" if server.grpc_port is not None else "")
            + "\nthis is a development server; production uses TF Serving (export/README.md). Ctrl-C stops it."
        )
        try:
            threading.Event().wait()
        finally:
            server.stop()
    finally:
        if scratch is not None:
            scratch.cleanup()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_bench(args):
    import json

    from keras_saat.bench import run_all, write_report

    log = (lambda _: None) if args.json else _log
    report = run_all(args.part or None, log=log, options={"images": args.images})
    if args.out:
        write_report(report, args.out)
    if args.json:
        print(json.dumps(report))
