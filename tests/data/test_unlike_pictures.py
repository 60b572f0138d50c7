"""The pictures the familiarity discriminant is fitted against: natural images' statistics."""

import numpy as np

from keras_saat.data.unlike_pictures import enlarged_thumbnail, power_law_noise, unlike_pictures


def test_unlike_pictures_are_seeded_and_a_third_grey():
    pictures = unlike_pictures(18, size=32, seed=7)
    assert pictures.shape == (18, 32, 32, 3) and pictures.dtype == np.uint8
    np.testing.assert_array_equal(pictures, unlike_pictures(18, size=32, seed=7))
    assert not np.array_equal(pictures, unlike_pictures(18, size=32, seed=8))
    grey = [bool(np.all(p == p[..., :1])) for p in pictures]
    assert grey == [(i // 3) % 3 == 2 for i in range(18)]
    assert all(p.std() > 5 for p in pictures)  # none a flat page


def test_power_law_noise_has_the_spectrum_it_is_drawn_with():
    """The radially averaged power falls as 1/f^a: the fitted log-log slope is -a."""
    rng = np.random.default_rng(0)
    size = 128
    fy, fx = np.meshgrid(np.fft.fftfreq(size), np.fft.fftfreq(size), indexing="ij")
    radius = np.sqrt(fx**2 + fy**2)
    bands = np.geomspace(2 / size, 0.4, 12)
    for exponent in (1.5, 2.5):
        power = np.zeros(len(bands) - 1)
        for _ in range(8):
            image = power_law_noise(rng, size, exponent)[..., 0]
            spectrum = np.abs(np.fft.fft2(image - image.mean())) ** 2
            power += [
                spectrum[(radius >= lo) & (radius < hi)].mean()
                for lo, hi in zip(bands, bands[1:], strict=False)
            ]
        centres = np.sqrt(bands[1:] * bands[:-1])
        slope = np.polyfit(np.log(centres), np.log(power), 1)[0]
        assert abs(slope + exponent) < 0.25, (exponent, slope)


def high_frequency_share(picture):
    """The share of a picture's (grey) spectral power above 0.2 cycles a pixel."""
    grey = picture.astype(np.float64).mean(-1)
    power = np.abs(np.fft.fft2(grey - grey.mean())) ** 2
    frequency = np.fft.fftfreq(grey.shape[0])
    return power[np.hypot(frequency[:, None], frequency[None]) > 0.2].sum() / power.sum()


def test_every_fourth_picture_is_a_thumbnail_enlarged():
    """Enlarged from 8-32 pixels, those keep almost none of the fine detail the others have."""
    pictures = unlike_pictures(48, size=128, seed=3)
    shares = [high_frequency_share(p) for p in pictures]
    thumbnails = [s for i, s in enumerate(shares) if i % 4 == 3]
    others = [s for i, s in enumerate(shares) if i % 4 != 3]
    assert max(thumbnails) < 0.02 and np.median(others) > 0.05, (thumbnails, others)
    picture = pictures[0]
    enlarged = enlarged_thumbnail(picture, 16)
    assert enlarged.shape == picture.shape and enlarged.dtype == np.uint8
    assert high_frequency_share(enlarged) < high_frequency_share(picture) / 5
    assert abs(float(enlarged.mean()) - float(picture.mean())) < 3  # the same picture, smoothed
