"""The files and folders of a workdir, each name spelled once.

config.yaml            the resolved experiment config
vocab.txt              the vocabulary, one token a line in id order
data/                  the generated Shapes world (when the dataset is shapes)
backbone.weights.h5    the pre-trained Shapes CNN
features/              the feature cache
checkpoints/           tf.train checkpoints, for resuming
logs/                  TensorBoard
history.json           per-epoch loss and validation scores
model.keras            the model with the best validation BLEU-4
eval/<split>/          predictions.json and metrics.json
xla_cache/             XLA's persistent compilation cache (a resumed run skips the compile)
"""

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.txt"
DATA_DIR = "data"
BACKBONE_WEIGHTS_FILE = "backbone.weights.h5"
FEATURES_DIR = "features"
CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
HISTORY_FILE = "history.json"
MODEL_FILE = "model.keras"
EVAL_DIR = "eval"
PREDICTIONS_FILE = "predictions.json"
METRICS_FILE = "metrics.json"
XLA_CACHE_DIR = "xla_cache"
