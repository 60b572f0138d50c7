"""Encoded image bytes -> checked, upright, resized pixels, shared by training,
`Captioner.generate`, the feature cache and the SavedModel.

- `image_formats`: the formats decoded, their magic bytes, DEFAULT_MAX_PIXELS (no TF);
- `image_files`: image paths found and read with a size cap (no TF; the command line
  checks paths with it before TensorFlow loads);
- `header_checks`: what a decode will cost, read from the header in the graph, with the
  JPEG segment walk (`jpeg_header`) and the GIF block walk (`gif_header`);
- `decoding`: decode, turn upright, resize.
"""
