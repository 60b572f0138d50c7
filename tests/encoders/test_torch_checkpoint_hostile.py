"""The `.pth` reader against crafted checkpoints: every declared size is checked against
what the file holds before anything is read or allocated.

Each crafted file (tests/support/crafted_checkpoints.py, the bench's hostile rows) is read
in a child process whose address space is capped 1 GiB above what it holds after
importing the reader, with a time limit: a reader that trusted the file would crash,
run out of memory or time there instead of answering with one line.
"""

import re

import numpy as np
import pytest

from keras_saat.encoders.torch_checkpoint import read_state_dict
from keras_saat.errors import KerasSaatError
from tests.helpers import run_capped_cases
from tests.support import crafted_checkpoints

WARM = "import keras_saat.encoders.torch_checkpoint"

# case -> what its one-line answer names (the item and the limit it broke)
EXPECTED = {
    "pth_stride_past_storage": r"tensor 'weight' \(storage 0\) reaches element 68719476736 of a storage of 4",
    "pth_small_overreach": r"tensor 'weight' \(storage 0\) reaches element 63 of a storage of 4",
    "pth_stride_zero_30000sq": r"tensor 'weight' \(storage 0\) has 900000000 elements from a storage of 1",
    "pth_zip_member_4gb": r"storage 0 declares 1 elements \(4 bytes\) but the file holds 4294967295",
    "pth_legacy_2e40_floats": r"storage 0 declares 1099511627776 elements; 16 bytes are left",
    "pth_pickle_memo_2e28": r"memo index 268435456 after 2 items",
    "pth_pickle_bytes_2e40": r"declares 1099511627776 bytes where \d+ are left",
}


def test_every_crafted_checkpoint_has_an_expectation():
    assert sorted(case.name for case in crafted_checkpoints.PTH_CASES) == sorted(EXPECTED)


@pytest.fixture(scope="module")
def capped():
    """Every crafted checkpoint read in one capped child, in turn."""
    return run_capped_cases(sorted(EXPECTED), warm=WARM, timeout=180)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_crafted_checkpoint_is_refused_inside_the_memory_cap(capped, name):
    status, answers, stderr = capped
    assert name in answers, f"the reader died or ran out of time ({status}) on {name}: {stderr}"
    assert ".pth" in answers[name], answers[name]  # names the file
    assert re.search(EXPECTED[name], answers[name]), answers[name]


def test_strided_and_offset_views_of_a_storage_still_read(tmp_path):
    """What torch.save writes for a transposed tensor and a slice: in-bounds views."""
    storage = np.arange(12, dtype="<f4")
    pickled = crafted_checkpoints.state_dict_pickle(
        [
            ("t", "0", 12, (4, 3), (1, 4)),
            ("s", "0", 12, (2, 2), (3, 1), 5),
            ("e", "0", 12, (0, 7), (7, 1)),
        ]
    )
    path = crafted_checkpoints.write_legacy_pth(
        tmp_path / "views.pth", pickled, {"0": (12, storage.tobytes())}
    )
    read = read_state_dict(path)
    np.testing.assert_array_equal(read["t"], storage.reshape(3, 4).T)
    np.testing.assert_array_equal(read["s"], [[5, 6], [8, 9]])
    assert read["e"].shape == (0, 7)
    zipped = crafted_checkpoints.write_zip_pth(
        tmp_path / "views_zip.pth", pickled, {"0": storage.tobytes()}
    )
    for name, array in read_state_dict(zipped).items():
        np.testing.assert_array_equal(array, read[name])


@pytest.mark.parametrize(
    "spec, message",
    [
        (("w", "0", 4, (2,), (-1,)), "strides"),
        (("w", "0", 4, (-2,), (1,)), "shape"),
        (("w", "0", 4, (2, 2), (1,)), "shape"),
        (("w", "0", 4, (1,) * 9, (1,) * 9), "9 dimensions"),
    ],
)
def test_negative_or_mismatched_shapes_are_refused(tmp_path, spec, message):
    pickled = crafted_checkpoints.state_dict_pickle([spec])
    path = crafted_checkpoints.write_zip_pth(tmp_path / "bad.pth", pickled, {"0": bytes(16)})
    with pytest.raises(KerasSaatError, match=message):
        read_state_dict(path)


def test_a_zip_member_shorter_or_longer_than_its_storage_is_refused(tmp_path):
    pickled = crafted_checkpoints.state_dict_pickle([("w", "0", 4, (4,), (1,))])
    for data in (bytes(12), bytes(20)):
        path = crafted_checkpoints.write_zip_pth(tmp_path / "len.pth", pickled, {"0": data})
        with pytest.raises(
            KerasSaatError,
            match=f"storage 0 declares 4 elements .16 bytes. but the file holds {len(data)}",
        ):
            read_state_dict(path)


def test_a_legacy_count_past_the_end_is_refused(tmp_path):
    pickled = crafted_checkpoints.state_dict_pickle([("w", "0", 4, (4,), (1,))])
    path = crafted_checkpoints.write_legacy_pth(
        tmp_path / "cut.pth", pickled, {"0": (4, bytes(12))}
    )
    with pytest.raises(KerasSaatError, match="declares 4 elements; 12 bytes are left"):
        read_state_dict(path)
