"""`keras-saat caption --runner`: the file list in shards, a Beam run, one output file a shard.

    OUT/captions-00000-<digest>.jsonl     the rows of the shard's images, sorted by image
    OUT/.lists/captions-00000-<digest>.txt  the shard's image paths, one JSON string a line

A shard's digest hashes its paths and its file is renamed into place when whole, so a
rerun skips the shards already written. OUT may be local or any Beam file system.
"""

import contextlib
import hashlib
import json
import os
import re
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from keras_saat.beam.captioning import CaptionKeyedImages, caption_row, remote_call
from keras_saat.beam.model_handler import BATCH_SIZE, SavedModelHandler, is_remote
from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import is_utf8, printable
from keras_saat.io_utils import sweep_temporaries, whole_number, write_bytes_atomic

PREFIX = "captions"
# A shard file's name (`shards`): only these are the run's; any other file in OUT is left.
SHARD_NAME = re.compile(rf"{PREFIX}-\d{{5}}-[0-9a-f]{{12}}\.jsonl")
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
    """The Beam runner `--runner NAME` means (its alias, or Beam's own name)."""
    key = name.lower().removesuffix("runner")
    if key in RUNNERS:
        return key
    raise KerasSaatError(
        f"--runner {name}: not a Beam runner here; give one of {', '.join(RUNNERS)}"
    )


@contextlib.contextmanager
def run_pipeline(runner, beam_args=()):
    """A Pipeline on `runner` (a `runner_name`) with Beam's own options, run when the block
    ends. "local" is FnApiRunner, which needs no Prism download; Prism fetches its binary
    from GitHub on first use, and offline that is one line, not Beam's traceback."""
    chosen = RUNNERS[runner]
    if runner == "local":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        chosen = FnApiRunner()
    try:
        with beam.Pipeline(runner=chosen, options=PipelineOptions(list(beam_args))) as pipeline:
            yield pipeline
    except RuntimeError as err:
        if runner != "prism" or "prism binary" not in str(err):
            raise
        raise KerasSaatError(
            "--runner prism: Beam could not fetch its Prism runner binary (it downloads one "
            "on first use); offline, use --runner local, or give its file after -- as "
            "--prism_location=PATH"
        ) from None


def saved_model_folder(path):
    """The SavedModel folder `path` names: itself, or the highest numeric version below it."""
    path = str(path).rstrip("/")
    if remote_call(path, FileSystems.exists, FileSystems.join(path, "saved_model.pb")):
        return path
    versions = []
    pattern = FileSystems.join(path, "*", "saved_model.pb")
    for found in FileSystems.match([pattern])[0].metadata_list:
        version = whole_number(found.path.rstrip("/").split("/")[-2])
        if version is not None:
            versions.append((version, found.path[: -len("/saved_model.pb")]))
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


def glob_escape(path):
    """`path` as a Beam match pattern that matches only itself (`[`, `*`, `?` bracketed)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in str(path))


def written_shards(out):
    """The names of the shards whose output file is in `out`; a local shard's name taken
    by something other than a file raises."""
    if is_remote(out):
        pattern = FileSystems.join(glob_escape(out), f"{PREFIX}-*.jsonl")
        found = remote_call(out, FileSystems.match, [pattern])[0].metadata_list
        names = {m.path.rstrip("/").split("/")[-1] for m in found}
    else:
        names = set(os.listdir(out)) if os.path.isdir(out) else set()
        for name in sorted(n for n in names if SHARD_NAME.fullmatch(n)):
            if not os.path.isfile(path := os.path.join(out, name)):
                raise KerasSaatError(f"{path} is not a file; remove it and run again")
    return {n.removesuffix(".jsonl") for n in names if SHARD_NAME.fullmatch(n)}


def _write_text(path, text, replace=False):
    """Writes `text` to `path` whole. A file already there stands (a retried bundle wrote
    it), unless `replace`."""
    data = text.encode("utf-8", "surrogateescape")
    if not is_remote(path):
        if replace or not os.path.exists(path):
            try:
                write_bytes_atomic(path, data)
            except OSError as err:
                raise KerasSaatError(f"{path}: cannot be written ({err.strerror})") from None
        return
    if not replace and FileSystems.exists(path):
        return
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with FileSystems.create(tmp) as stream:
        stream.write(data)
    FileSystems.rename([tmp], [path])


def _remove(paths):
    """Removes files by name (a name is never a pattern)."""
    for path in paths:
        if is_remote(path):
            FileSystems.delete([glob_escape(path)])
        elif os.path.isfile(path):
            os.remove(path)


def write_caption_list(out, name, chunk):
    """OUT/.lists/NAME.txt: the shard's paths, one JSON string a line."""
    folder = FileSystems.join(out, LISTS)
    if not is_remote(out):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as err:
            raise KerasSaatError(
                f"{folder}: cannot hold the shard lists ({err.strerror}); remove it and run again"
            ) from None
    lines = "".join(json.dumps(path) + "\n" for path in chunk)
    _write_text(FileSystems.join(folder, name + ".txt"), lines, replace=True)


class _ShardPaths(beam.DoFn):
    """A shard's name -> (name, path) for each of its images; a name that is not UTF-8
    (Beam's coders carry text) -> its error row on the "unread" output."""

    def __init__(self, out):
        self._out = out

    def process(self, name):
        with FileSystems.open(FileSystems.join(self._out, LISTS, name + ".txt")) as stream:
            lines = stream.read().decode("utf-8").splitlines()
        for line in lines:
            path = json.loads(line)
            if is_utf8(path):
                yield name, path
            else:
                row = caption_row(
                    printable(path), error="the file name is not valid UTF-8; rename the file"
                )
                yield beam.pvalue.TaggedOutput("unread", (name, row))


class _WriteShard(beam.DoFn):
    """(name, rows) -> OUT/name.jsonl, whole or not at all."""

    def __init__(self, out):
        self._out = out

    def process(self, element):
        name, rows = element
        text = "".join(json.dumps(row) + "\n" for row in sorted(rows, key=lambda r: r["image"]))
        _write_text(FileSystems.join(self._out, name + ".jsonl"), text)


def caption_run(saved_model, paths, out, runner="local", beam_args=(), batch_size=BATCH_SIZE,
                shard_size=500, large_model=False, log=print):  # fmt: skip
    """Captions `paths` (`expand_patterns`, in order) into shard files under `out` (created
    when local) with Beam, skipping shards written before. Returns a dict: shards (all),
    skipped (written before), images and errors (this run's).

    Args:
        saved_model: str. A SavedModel folder, or a model base (its highest version).
        runner: str. A `runner_name`. Defaults to "local".
        beam_args: list of str. Beam's pipeline options (--project=..., --num_workers=...).
        batch_size, large_model: as `SavedModelHandler`.
        shard_size: int. Images per output file. Defaults to 500.
    """
    model = saved_model_folder(saved_model)
    for folder in (out, os.path.join(out, LISTS)):  # a killed run's: local folders only
        if not is_remote(out) and os.path.isdir(folder):
            sweep_temporaries(folder, log)
    everything = shards(paths, shard_size)
    done = written_shards(out)
    stale = sorted(done - {name for name, _ in everything})
    if stale:  # shards of images no longer given: their rows would stand beside the new ones
        log(f"{out}: removing {len(stale)} shard files of images no longer given")
        _remove(FileSystems.join(out, f"{name}.jsonl") for name in stale)
        _remove(FileSystems.join(out, LISTS, f"{name}.txt") for name in stale)
        done -= set(stale)
    todo = [(name, chunk) for name, chunk in everything if name not in done]
    skipped = len(everything) - len(todo)
    if done:
        log(f"{out}: {skipped} of {len(everything)} shards already written, skipping them")
    summary = {"shards": len(everything), "skipped": skipped, "images": 0, "errors": 0}
    if not todo:
        return summary
    for name, chunk in todo:
        write_caption_list(out, name, chunk)
    handler = SavedModelHandler(model, batch_size=batch_size, large_model=large_model)
    with run_pipeline(runner, beam_args) as pipeline:
        paths = (
            pipeline
            | "Shards" >> beam.Create([name for name, _ in todo])
            | "SpreadShards" >> beam.Reshuffle()
            | "Paths" >> beam.ParDo(_ShardPaths(out)).with_outputs("unread", main="paths")
        )
        rows = (
            paths.paths
            | "SpreadImages" >> beam.Reshuffle()
            | "Caption" >> CaptionKeyedImages(handler)
        )
        _ = (
            (rows, paths.unread)
            | "AllRows" >> beam.Flatten()
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
