"""The paper's layers: soft and hard attention, the attention LSTM decoder, and the
familiarity statistics. Names load on first use, so the registry works without Keras."""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "FeatureFamiliarity": "keras_saat.layers.feature_familiarity",
    "HardAttention": "keras_saat.layers.hard_attention",
    "LSTMDecoder": "keras_saat.layers.lstm_decoder",
    "SoftAttention": "keras_saat.layers.soft_attention",
    "available_attentions": "keras_saat.layers.attention_registry",
    "get_attention": "keras_saat.layers.attention_registry",
    "register_attention": "keras_saat.layers.attention_registry",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("keras_saat.layers", _EXPORTS, globals())


def __dir__():
    return __all__
