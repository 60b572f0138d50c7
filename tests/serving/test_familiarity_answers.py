"""The novelty and familiar outputs through the clients and the development server's JSON."""

import json
import math

import numpy as np

from keras_saat.serving.answers import json_value
from keras_saat.serving.captions import captions_from_outputs


def outputs(**extra):
    return {
        "caption": [b"a red circle", b""],
        "tokens": [[b"a", b"red", b"circle", b"<end>"], [b"", b"", b"", b""]],
        "log_prob": [-0.5, 0.0],
        "attention": np.zeros((2, 4, 2, 2), np.float32),
        "valid": [True, False],
        "error": [b"", b"truncated"],
        **extra,
    }


def test_the_development_server_writes_a_never_calibrated_novelty_as_null():
    """JSON has no NaN (a browser's JSON.parse refuses it): null, which the clients read as NaN."""
    novelty = np.array([np.nan, 0.0], np.float32)
    text = json.dumps({"novelty": json_value(novelty), "log_prob": json_value(np.zeros(2))})
    assert json.loads(text) == {"novelty": [None, 0.0], "log_prob": [0.0, 0.0]}
    got = captions_from_outputs(outputs(novelty=[None, 0.0], familiar=[True, False]))
    assert math.isnan(got[0]["novelty"]) and got[0]["familiar"] is True
    assert got[1]["novelty"] == 0.0 and got[1]["familiar"] is False


def test_clients_read_novelty_and_familiar_and_models_exported_without_them():
    got = captions_from_outputs(outputs(novelty=[2.5, 0.0], familiar=[False, False]))
    assert (got[0]["novelty"], got[0]["familiar"]) == (2.5, False)
    older = captions_from_outputs(outputs())  # a model exported before familiarity
    assert math.isnan(older[0]["novelty"]) and older[0]["familiar"] is True
    assert older[0]["caption"] == "a red circle" and older[0]["tokens"][-1] == "<end>"
