"""The paper's layers: soft and hard attention (in a registry), the attention LSTM decoder."""

from keras_saat.layers.attention_registry import (
    available_attentions,
    get_attention,
    register_attention,
)
from keras_saat.layers.hard_attention import HardAttention
from keras_saat.layers.lstm_decoder import LSTMDecoder
from keras_saat.layers.soft_attention import SoftAttention

__all__ = [
    "HardAttention",
    "LSTMDecoder",
    "SoftAttention",
    "available_attentions",
    "get_attention",
    "register_attention",
]
