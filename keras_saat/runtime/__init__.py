"""Process-wide runtime settings (malloc, oneDNN, precision, XLA, TensorFlow's log lines),
most read once when TensorFlow starts; no module here imports TensorFlow when imported."""
