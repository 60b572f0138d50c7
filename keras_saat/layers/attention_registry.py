"""Attention registry: name -> attention layer class.

A new attention type is one file with a class (usually a `SoftAttention` subclass that
overrides `attend`, or `call` and the declarations below) and one
`register_attention("name", TheClass)`. The decoder builds it by name; `model.attention`
in a config then accepts the name. What a type adds is declared on its class, never
found by comparing names:

    options            Captioner arguments its constructor takes (hard: hard_soft_probability)
    begin()            per-caption draws passed to every step (hard: use_expectation)
    sequence_outputs() decoder outputs beyond logits, alphas and betas (hard: samples, ...)
    reinforce          whether it adds REINFORCE terms and moves the model's baseline
    policy_terms()     log p and entropy of its draws, and the rows that drew (reinforce only)
    doubly_stochastic_lambda
                       the model's Eq. 14 weight when the config leaves it null (soft 1.0,
                       hard 0)
"""

from keras_saat.registries import Registry

ATTENTIONS = Registry("attention")
register_attention = ATTENTIONS.register
available_attentions = ATTENTIONS.names
get_attention = ATTENTIONS.get

# By module path: the names are known (a config is checked) before Keras is imported.
register_attention("soft", "keras_saat.layers.soft_attention:SoftAttention")
register_attention("hard", "keras_saat.layers.hard_attention:HardAttention")
