"""CaptionGeneration: the captioning side `Captioner` inherits (preprocessor, compiled
`decode`, postprocessor, chained by `generate` as in keras-hub's `CausalLM`)."""

import contextlib
import functools

import tensorflow as tf
from keras import ops

from keras_saat.decoding.beam import beam_search, tile_beams
from keras_saat.decoding.greedy import greedy_search
from keras_saat.errors import KerasSaatError
from keras_saat.models.batch_decoder import BatchDecoder
from keras_saat.models.postprocessor import CaptionPostprocessor
from keras_saat.models.preprocessor import ImagePreprocessor, feature_batches
from keras_saat.text.vocabulary import END_ID, PAD_ID, START_ID


class CaptionGeneration:
    """The captioning methods and the pre- and postprocessors of a Captioner, which has
    `image_size`, `resize`, `max_pixels`, `vocabulary`, `grid_shape`, `encoder`, `annotate`,
    `decoder`, `max_length`, `beam_size` and `length_penalty`."""

    def preprocessor(self, resize=None):
        """The ImagePreprocessor for this model's input; `resize` None = the model's rule."""
        return ImagePreprocessor(self.image_size, resize or self.resize, self.max_pixels)

    def generate_step(self, features, max_length, beam_size=1, length_penalty=0.0):
        """The decoding graph: (B, L, C) features -> `decode`'s outputs, uncompiled."""
        annotations = self.annotate(features)  # (B, L, D)
        projected = self.decoder.attention.project(annotations)
        h, c = self.decoder.initial_state(annotations)
        state = {"h": h, "c": c, "alpha": ops.zeros(ops.shape(annotations)[:2], annotations.dtype)}
        start = tf.fill(tf.shape(features)[:1], START_ID)

        # <pad> and <start> are never generated: a caption is words, then <end>.
        banned = tf.one_hot([PAD_ID, START_ID], len(self.vocabulary), on_value=-1e9)
        banned = tf.reduce_sum(banned, axis=0)  # (K,)
        if beam_size > 1:  # the B*K hypotheses attend over their image's annotations
            annotations = tile_beams(annotations, beam_size)  # (B*K, L, D)
            projected = tile_beams(projected, beam_size)

        kernels = self.decoder.step_kernels(annotations.dtype)  # once, outside the loop

        def next_fn(tokens, state):
            logits, state = self.decoder.step(tokens, state, annotations, projected, kernels)
            return tf.cast(logits, tf.float32) + banned, state

        search = (next_fn, state, start, END_ID)  # both searches' first arguments
        if beam_size > 1:
            decoded = beam_search(
                *search, beam_size, max_length + 1, length_penalty=length_penalty, record=("alpha",)
            )
        else:
            decoded = greedy_search(*search, max_length + 1, record=("alpha",))
        decoded["novelty"] = self.familiarity(features)  # (B,), NaN before calibration
        return decoded

    def decode(self, features, max_length=None, beam_size=1, length_penalty=0.0):
        """Greedy (beam_size 1) or beam search decoding from backbone features (B, L, C).

        Args:
            features: (B, L, C) backbone features.
            max_length: int or None. Maximum words. Defaults to the model's max_length.
            beam_size: int. Beam width; 1 is greedy decoding. Defaults to 1.
            length_penalty: float. Beam search ranks finished captions by
                log p / length ** length_penalty. Defaults to 0 (the raw log-probability).

        Returns:
            dict of tensors: tokens (B, T) with T = max_length + 1 (the <end> token
            included), lengths (B,), log_prob (B,), alpha (B, T, L), novelty (B,) (the
            image's distance from the training images, above 1 when unlike them; NaN
            while the model is not calibrated, `calibrate_familiarity`).
        """
        max_length = int(max_length or self.max_length)
        beam_size = int(beam_size)
        if beam_size < 1:
            raise KerasSaatError(f"beam_size must be at least 1; got {beam_size}")
        key = (max_length, beam_size, float(length_penalty), self.decode_jit_compile)
        if key not in self._decode_fns:
            # A partial, not a lambda, so TensorFlow does not count each key as a retrace.
            # No AutoGraph: the searches are tf.while_loop already.
            step = functools.partial(
                self.generate_step,
                max_length=max_length,
                beam_size=beam_size,
                length_penalty=float(length_penalty),
            )
            jit_compile = self.decode_jit_compile
            self._decode_fns[key] = tf.function(step, jit_compile=jit_compile, autograph=False)
        return self._decode_fns[key](tf.convert_to_tensor(features, tf.float32))

    @property
    def postprocessor(self):
        """The CaptionPostprocessor for this model's vocabulary and feature grid."""
        return CaptionPostprocessor(self.vocabulary, self.grid_shape)

    def generate(
        self,
        images=None,
        features=None,
        max_length=None,
        batch_size=None,
        return_details=False,
        resize=None,
        beam_size=None,
        length_penalty=None,
        errors="raise",
    ):
        """Captions images with the model's decoding settings (beam search by default).

        Args:
            images: image file path(s), encoded image bytes, or pixels (B, H, W, 3) or
                (H, W, 3) in [0, 255].
            features: (B, L, C) backbone features instead of images.
            max_length: int or None. Maximum words. Defaults to the model's max_length.
            batch_size: int or None. Images per decoding batch, every batch padded to it
                (one compiled shape). Defaults to None, `decode.batch_size`'s default.
            return_details: bool. Return dicts with words, log_prob, attention
                (T, grid_h, grid_w), novelty, familiar and error instead of strings
                (`generate_stream`). Defaults to False.
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
        stream = self.generate_stream(
            images, features, max_length, batch_size, resize, beam_size, length_penalty, errors
        )
        return [result if return_details else result["caption"] for result in stream]

    def generate_stream(
        self,
        images=None,
        features=None,
        max_length=None,
        batch_size=None,
        resize=None,
        beam_size=None,
        length_penalty=None,
        errors="skip",
    ):
        """Yields one caption dict per image, in order, a batch at a time.

        Takes what `generate` takes; `images` may be any iterable of paths or bytes. Each
        dict has image, caption, words, log_prob, attention (steps, grid_h, grid_w),
        novelty, familiar and error ("" when captioned; the others None when not).
        `familiar` is False when `novelty` is above 1; uncalibrated models give NaN, True.

        Args:
            errors: str. "skip" (yield the error row) or "raise". Defaults to "skip".
        """
        if (images is None) == (features is None):
            raise KerasSaatError("generate() takes exactly one of images= or features=")
        if errors not in ("raise", "skip"):
            raise KerasSaatError(f"errors must be 'raise' or 'skip'; got {errors!r}")
        decoder = BatchDecoder(self, batch_size, max_length, beam_size, length_penalty)
        if features is not None:
            batches = feature_batches(features, decoder.batch_size)
        else:
            batches = self.preprocessor(resize).rows(images, decoder.batch_size)
        with contextlib.closing(batches):  # its reader stops with this stream, raised or not
            for batch in batches:
                key = "features" if "features" in batch else "pixels"
                details = decoder(**{key: batch[key]})
                for name, valid, error, result in zip(
                    batch["image"], batch["valid"], batch["error"], details, strict=True
                ):
                    if valid:
                        yield {"image": name, **result, "error": ""}
                    elif errors == "raise":
                        raise KerasSaatError(f"cannot caption {name}: {error}")
                    else:
                        empty = dict.fromkeys(
                            ("caption", "words", "log_prob", "attention", "novelty", "familiar")
                        )
                        yield {"image": name, **empty, "error": error}
