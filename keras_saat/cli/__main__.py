"""`python -m keras_saat.cli`: the `keras-saat` command."""

from keras_saat.cli import run

run()
