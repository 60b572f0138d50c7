"""CaptionImages and SavedModelHandler on Beam's FnApiRunner, in this process."""

import json

import pytest

beam = pytest.importorskip("apache_beam")

from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.test_pipeline import TestPipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from keras_saat.beam import CaptionImages, SavedModelHandler, caption_row  # noqa: E402
from keras_saat.models.factories import load_captioner  # noqa: E402

FIELDS = ["caption", "error", "familiar", "image", "log_prob", "novelty"]  # caption --out's


def run_rows(patterns, handler, folder, expected=None):
    """The rows CaptionImages makes of `patterns`, sorted by image (through text files
    in `folder`: the pipeline's functions run on pickled copies). Each of the `expected`
    rows (default: one a pattern) has the fields of `caption --out`."""
    expected = len(patterns) if expected is None else expected
    with TestPipeline(runner=FnApiRunner()) as pipeline:
        rows = pipeline | beam.Create([str(p) for p in patterns]) | CaptionImages(handler)
        assert_that(rows | beam.Map(lambda row: sorted(row)), equal_to([FIELDS] * expected))
        _ = rows | beam.Map(json.dumps) | beam.io.WriteToText(str(folder / "rows"))
    found = [json.loads(line) for f in folder.glob("rows*") for line in f.read_text().splitlines()]
    return sorted(found, key=lambda row: row["image"])


def expected_rows(workdir, images):
    """What the one-process Captioner says of `images`, as `caption --out` rows."""
    model = load_captioner(workdir)
    return {
        str(r["image"]): r for r in model.generate_stream([str(p) for p in images], batch_size=4)
    }


@pytest.mark.slow
def test_rows_equal_the_captioner_and_bad_files_are_error_rows(
    export_base, trained_workdir, test_images, tmp_path
):
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    missing = tmp_path / "missing.jpg"
    handler = SavedModelHandler(str(export_base / "1"), batch_size=2)
    rows = run_rows([*test_images, corrupt, missing], handler, tmp_path)

    by_image = {row["image"]: row for row in rows}
    assert len(rows) == len(test_images) + 2
    expected = expected_rows(trained_workdir, test_images)
    for image in map(str, test_images):
        assert by_image[image]["error"] == ""
        assert by_image[image]["caption"] == expected[image]["caption"]
        assert by_image[image]["log_prob"] == pytest.approx(expected[image]["log_prob"], abs=1e-3)
        assert by_image[image]["novelty"] == pytest.approx(expected[image]["novelty"], abs=1e-3)
        assert by_image[image]["familiar"] == expected[image]["familiar"]
    assert by_image[str(corrupt)]["caption"] is None and by_image[str(corrupt)]["error"]
    assert by_image[str(missing)] == caption_row(missing, error="file not found")


def test_a_folder_argument_expands_like_keras_saat_caption(small_export, test_images, tmp_path):
    folder = tmp_path / "photos" / "deeper"
    folder.mkdir(parents=True)
    for image in test_images[:2]:
        (folder / image.name).write_bytes(image.read_bytes())
    rows = run_rows([tmp_path / "photos"], SavedModelHandler(str(small_export / "1")), tmp_path, 2)
    assert [r["image"] for r in rows] == sorted(str(folder / p.name) for p in test_images[:2])
    assert all(r["error"] == "" and r["caption"] is not None for r in rows)  # untrained: may be ""


class RaisingHandler(SavedModelHandler):
    """A handler whose model raises on any batch holding the image file `refused`."""

    def __init__(self, path, refused):
        super().__init__(path, batch_size=1)
        self._refused = str(refused)

    def run_inference(self, batch, model, inference_args=None):
        if any(item.path == self._refused for item in batch):  # ImageFile references
            raise RuntimeError("the model gave up on this batch")
        return super().run_inference(batch, model, inference_args)


def test_a_batch_the_model_raises_on_becomes_error_rows(small_export, test_images, tmp_path):
    refused = tmp_path / "refused.png"
    refused.write_bytes(test_images[0].read_bytes() + b"!")  # decodes; differs in bytes
    handler = RaisingHandler(str(small_export / "1"), refused)
    rows = run_rows([refused, *test_images[1:]], handler, tmp_path)

    by_image = {row["image"]: row for row in rows}
    assert by_image[str(refused)]["caption"] is None
    assert by_image[str(refused)]["error"] == (
        "the model raised RuntimeError: the model gave up on this batch"
    )
    assert all(by_image[str(p)]["error"] == "" for p in test_images[1:])


@pytest.mark.slow
def test_large_model_serves_one_copy_through_beams_proxy(export_base, test_images, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = run_rows(test_images, SavedModelHandler(str(export_base / "1")), tmp_path / "a")
    large = SavedModelHandler(str(export_base / "1"), large_model=True)
    shared = run_rows(test_images, large, tmp_path / "b")
    assert shared == plain


def test_an_unknown_signature_names_the_ones_there(small_export):
    from keras_saat.beam.model_handler import SignatureCall
    from keras_saat.errors import KerasSaatError

    with pytest.raises(KerasSaatError, match="no signature 'nope'; it has .*serving_default"):
        SignatureCall(str(small_export / "1"), "nope", "image_bytes", ("caption",))
