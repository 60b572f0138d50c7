"""Encoded image bytes -> checked, upright, resized pixels, shared by training,
`Captioner.generate`, the feature cache and the SavedModel."""
