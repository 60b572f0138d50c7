"""`keras-saat caption --runner`: the file list in shards, a Beam run, one output file a shard.

    OUT/captions-00000-<digest>.jsonl     the rows of the shard's images, sorted by image
    OUT/.lists/captions-00000-<digest>.txt  the shard's image paths, one a line

A shard's digest hashes its paths, and its output is written under a temporary name
and renamed when whole, so a rerun over the same images skips the shards already
written and redoes the rest. Everything goes through Beam's file systems, so OUT and
the images may be local folders or gs:// (or s3://, ...) locations.
"""

import hashlib
import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from keras_saat.beam.captioning import CaptionKeyedImages, remote_call
from keras_saat.beam.model_handler import SavedModelHandler
from keras_saat.errors import KerasSaatError

PREFIX = "captions"
LISTS = ".lists"
# --runner NAME -> Beam's runner name; "local" is the FnApiRunner object (below).
RUNNERS = {
    "local": None,
    "direct": "DirectRunner",
    "prism": "PrismRunner",
    "dataflow": "DataflowRunner",
    "flink": "FlinkRunner",
    "spark": "SparkRunner",
}


def runner_name(name):
    """The Beam runner `--runner NAME` means (its alias, or Beam's own name).

    Raises:
        KerasSaatError: a name that is neither.
    """
    key = name.lower().removesuffix("runner")
    if key in RUNNERS:
        return key
    raise KerasSaatError(
        f"--runner {name}: not a Beam runner here; give one of {', '.join(RUNNERS)}"
    )


def make_pipeline(runner, beam_args=()):
    """A Pipeline on `runner` (a `runner_name`), with Beam's own options `beam_args`.

    "local" is the FnApiRunner object: DirectRunner would first try to download the
    Prism runner, and FnApiRunner honours --direct_num_workers and
    --direct_running_mode=multi_processing all the same.
    """
    options = PipelineOptions(list(beam_args))
    if runner == "local":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return beam.Pipeline(runner=FnApiRunner(), options=options)
    return beam.Pipeline(runner=RUNNERS[runner], options=options)


def saved_model_folder(path):
    """The SavedModel folder `path` names: itself, or the highest numeric version below it.

    Raises:
        KerasSaatError: neither holds saved_model.pb.
    """
    path = str(path).rstrip("/")
    if remote_call(path, FileSystems.exists, FileSystems.join(path, "saved_model.pb")):
        return path
    versions = []
    for found in FileSystems.match([FileSystems.join(path, "*", "saved_model.pb")])[
        0
    ].metadata_list:
        version = found.path.rstrip("/").split("/")[-2]
        if version.isdigit():
            versions.append((int(version), found.path[: -len("/saved_model.pb")]))
    if not versions:
        raise KerasSaatError(
            f"--saved-model {path}: no saved_model.pb there nor in a version folder below it; "
            "write one with `keras-saat export --workdir RUN --out BASE`"
        )
    return max(versions)[1]


def shards(paths, size):
    """The images in shards of `size`: list of (name, paths), the name from its paths."""
    out = []
    for index, start in enumerate(range(0, len(paths), size)):
        chunk = [str(p) for p in paths[start : start + size]]
        digest = hashlib.sha256("\n".join(chunk).encode("utf-8", "surrogateescape")).hexdigest()
        out.append((f"{PREFIX}-{index:05d}-{digest[:12]}", chunk))
    return out


def written_shards(out):
    """The names of the shards whose output file is in `out`."""
    pattern = FileSystems.join(out, f"{PREFIX}-*.jsonl")
    found = remote_call(out, FileSystems.match, [pattern])[0].metadata_list
    return {m.path.rstrip("/").split("/")[-1].removesuffix(".jsonl") for m in found}


def _write_text(path, text):
    tmp = path + ".tmp"
    with FileSystems.create(tmp) as stream:
        stream.write(text.encode("utf-8", "surrogateescape"))
    if FileSystems.exists(path):  # a retried bundle: its first write stands
        FileSystems.delete([tmp])
        return
    FileSystems.rename([tmp], [path])


def _shard_paths(name, out):
    with FileSystems.open(FileSystems.join(out, LISTS, name + ".txt")) as stream:
        text = stream.read().decode("utf-8", "surrogateescape")
    return [(name, path) for path in text.split("\n") if path]


class _WriteShard(beam.DoFn):
    """(name, rows) -> OUT/name.jsonl, whole or not at all."""

    def __init__(self, out):
        self._out = out

    def process(self, element):
        name, rows = element
        rows = sorted(rows, key=lambda row: row["image"])
        _write_text(
            FileSystems.join(self._out, name + ".jsonl"),
            "".join(json.dumps(row) + "\n" for row in rows),
        )


def caption_run(saved_model, paths, out, runner="local", beam_args=(), batch_size=32,
                shard_size=500, large_model=False, log=print):  # fmt: skip
    """Captions `paths` into shard files under `out` with Beam, skipping shards written before.

    Args:
        saved_model: str. A SavedModel folder, or a model base (its highest version).
        paths: list of str. The images, in order (`expand_patterns`).
        out: str. The output folder (created when local and missing).
        runner: str. A `runner_name`. Defaults to "local".
        beam_args: list of str. Beam's pipeline options (--project=..., --num_workers=...).
        batch_size: int. Images per model call. Defaults to 32.
        shard_size: int. Images per output file. Defaults to 500.
        large_model: bool. One model copy per machine. Defaults to False.
        log: callable.

    Returns:
        dict: shards (all), skipped (written before), images and errors (this run's).
    """
    model = saved_model_folder(saved_model)
    everything = shards(paths, shard_size)
    done = written_shards(out)
    todo = [(name, chunk) for name, chunk in everything if name not in done]
    if done:
        log(
            f"{out}: {len(everything) - len(todo)} of {len(everything)} shards already written, skipping them"
        )
    summary = {
        "shards": len(everything),
        "skipped": len(everything) - len(todo),
        "images": 0,
        "errors": 0,
    }
    if not todo:
        return summary
    for name, chunk in todo:
        _write_text(FileSystems.join(out, LISTS, name + ".txt"), "".join(p + "\n" for p in chunk))
    handler = SavedModelHandler(model, batch_size=batch_size, large_model=large_model)
    with make_pipeline(runner, beam_args) as pipeline:
        _ = (
            pipeline
            | "Shards" >> beam.Create([name for name, _ in todo])
            | "SpreadShards" >> beam.Reshuffle()
            | "Paths" >> beam.FlatMap(_shard_paths, out)
            | "SpreadImages" >> beam.Reshuffle()
            | "Caption" >> CaptionKeyedImages(handler)
            | "ByShard" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(_WriteShard(out))
        )
    for name, _ in todo:  # the files are the record on any runner; read their counts back
        rows = read_shard(FileSystems.join(out, name + ".jsonl"))
        summary["images"] += len(rows)
        summary["errors"] += sum(1 for row in rows if row["error"])
    return summary


def read_shard(path):
    """The rows of one output shard (list of dict)."""
    with FileSystems.open(path, compression_type="uncompressed") as stream:
        text = stream.read().decode("utf-8", "surrogateescape")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
