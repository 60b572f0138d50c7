"""`keras-saat bench --part scale`: the synthetic datasets have COCO's and CC3M's shape,
and every phase is reported."""

from keras_saat.bench.parts import PARTS
from keras_saat.bench.scale import measure_scale


def test_a_small_coco_shaped_run_reports_each_phase():
    row = measure_scale("coco", 40)
    assert row["captions"] == 200 and row["images"] == 40
    assert list(row["phases"]) == [
        "start",
        "read",
        "vocabulary",
        "cache_open",
        "token_table",
        "epoch",
        "resume",
    ]
    assert row["resume_step"] > 0
    peaks = [p["peak_rss_mb"] for p in row["phases"].values()]
    assert peaks == sorted(peaks) and all(p["seconds"] >= 0 for p in row["phases"].values())


def test_the_plan_takes_the_images_option():
    part = PARTS.get("scale")
    assert part.options == ("images",)
    assert part.plan({}, ["float32"], images=500) == [("coco", 500), ("cc3m", 500)]
    assert part.plan({}, ["float32"]) == [("coco", 10_000), ("cc3m", 10_000)]
