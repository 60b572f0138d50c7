"""Process-wide runtime settings (malloc, oneDNN, precision, XLA, TensorFlow's log lines).

Most are read once, when TensorFlow starts, so the command line sets them first; none of
these modules imports TensorFlow when imported.
"""
