"""Attention registry: name -> attention layer class.

A new attention type is a class (usually a `SoftAttention` subclass) and one
`register_attention("name", TheClass)`. What a type adds is declared on its class
(`options`, `begin`, `sequence_outputs`, `reinforce`, `policy_terms`,
`doubly_stochastic_lambda`), never found by comparing names.
"""

from keras_saat.registries import Registry

ATTENTIONS = Registry("attention")
register_attention = ATTENTIONS.register
available_attentions = ATTENTIONS.names
get_attention = ATTENTIONS.get

# By module path: the names are known (a config is checked) before Keras is imported.
register_attention("soft", "keras_saat.layers.soft_attention:SoftAttention")
register_attention("hard", "keras_saat.layers.hard_attention:HardAttention")
