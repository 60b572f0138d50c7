"""CaptionGeneration: the captioning front end `Captioner` inherits.

As keras-hub's `CausalLM.generate` does, captioning runs in three parts:
`preprocessor()` (files, bytes or pixels -> input pixels), the model's compiled
`decode` (which the export also builds on), and `postprocessor` (ids -> words and
attention grids). `generate` and `generate_stream` chain them, a batch at a time.
"""

from keras_saat.errors import KerasSaatError
from keras_saat.models.postprocessor import CaptionPostprocessor
from keras_saat.models.preprocessor import ImagePreprocessor, feature_batches


class CaptionGeneration:
    """`generate`, `generate_stream` and the pre- and postprocessors of a model with
    `image_size`, `resize`, `vocabulary`, `grid_shape`, `encoder`, `decode`,
    `beam_size` and `length_penalty` (a Captioner)."""

    def preprocessor(self, resize=None):
        """The ImagePreprocessor for this model's input size; `resize` None = the model's rule."""
        return ImagePreprocessor(self.image_size, resize or self.resize)

    @property
    def postprocessor(self):
        """The CaptionPostprocessor for this model's vocabulary and feature grid."""
        return CaptionPostprocessor(self.vocabulary, self.grid_shape)

    def generate(
        self,
        images=None,
        features=None,
        max_length=None,
        batch_size=32,
        return_details=False,
        resize=None,
        beam_size=None,
        length_penalty=None,
        errors="raise",
    ):
        """Captions images with the model's decoding settings (beam search by default).

        Image files and encoded bytes stream through `tf.data` a batch at a time
        (`generate_stream`), so memory does not grow with their number.

        Args:
            images: image file path(s), encoded image bytes, or pixels (B, H, W, 3) or
                (H, W, 3) in [0, 255].
            features: (B, L, C) backbone features instead of images.
            max_length: int or None. Maximum words. Defaults to the model's max_length.
            batch_size: int. Images per decoding batch. Defaults to 32.
            return_details: bool. Return dicts with words, log_prob, attention
                (T, grid_h, grid_w) and error instead of strings. Defaults to False.
            resize: str or None. How images of another size reach the input: "crop",
                "pad" or "stretch". Defaults to None, the model's own rule (`resize`).
            beam_size: int or None. Beam width; 1 is greedy decoding. Defaults to None,
                the model's own (`decode.beam_size` of its training config).
            length_penalty: float or None. Beam search's length normalisation exponent.
                Defaults to None, the model's own.
            errors: str. "raise": a file that cannot be read or decoded raises a
                KerasSaatError naming it; "skip": its caption is None (with
                return_details, a dict whose `error` says why). Defaults to "raise".

        Returns:
            list of str (or of dict with return_details), one per image.
        """
        results = []
        for result in self.generate_stream(
            images, features, max_length, batch_size, resize, beam_size, length_penalty, errors
        ):
            results.append(result if return_details else result["caption"])
        return results

    def generate_stream(
        self,
        images=None,
        features=None,
        max_length=None,
        batch_size=32,
        resize=None,
        beam_size=None,
        length_penalty=None,
        errors="skip",
    ):
        """Yields one caption dict per image, in order, a batch at a time.

        Takes what `generate` takes; `images` may be any iterable of paths or bytes
        (a generator over a folder of a million files is fine). Each dict has image
        (the path, "#<index>" for bytes, or the row number), caption, words, log_prob,
        attention (steps, grid_h, grid_w) and error ("" when captioned; caption, words,
        log_prob and attention are None when not).

        Args:
            errors: str. "skip" (yield the error row) or "raise". Defaults to "skip".
        """
        if (images is None) == (features is None):
            raise KerasSaatError("generate() takes exactly one of images= or features=")
        if errors not in ("raise", "skip"):
            raise KerasSaatError(f"errors must be 'raise' or 'skip'; got {errors!r}")
        settings = (
            max_length,
            self.beam_size if beam_size is None else beam_size,
            self.length_penalty if length_penalty is None else length_penalty,
        )
        if features is not None:
            batches = feature_batches(features, batch_size)
        else:
            batches = self.preprocessor(resize).rows(images, batch_size)
        for batch in batches:
            if "features" in batch:
                chunk = batch["features"]
            else:
                chunk = self.encoder.compiled()(batch["pixels"])
            details = self.postprocessor(self.decode(chunk, *settings))
            for name, valid, error, result in zip(
                batch["image"], batch["valid"], batch["error"], details, strict=True
            ):
                if valid:
                    yield {"image": name, **result, "error": ""}
                elif errors == "raise":
                    raise KerasSaatError(f"cannot caption {name}: {error}")
                else:
                    empty = dict.fromkeys(("caption", "words", "log_prob", "attention"))
                    yield {"image": name, **empty, "error": error}
