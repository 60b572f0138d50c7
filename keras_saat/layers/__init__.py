"""The paper's layers: soft and hard attention, the attention LSTM decoder."""

from keras_saat.layers.hard_attention import HardAttention
from keras_saat.layers.lstm_decoder import LSTMDecoder
from keras_saat.layers.soft_attention import SoftAttention

__all__ = ["HardAttention", "LSTMDecoder", "SoftAttention"]
