"""The math and the model, floor by floor: rope (with rope_scaling and the slow
rope_reference beside it), attention kinds (attention, attention_step, feature_maps),
positions (the table of position encodings), model_config and model (the encoder), heads
(task heads), decoding (generation). Pure functions over arrays; Flax modules own the
parameters and call them."""
