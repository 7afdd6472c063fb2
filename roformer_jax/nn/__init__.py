"""The math and the model, floor by floor: rope (the formula; rope_phase holds its exact
angles, rope_layouts its pairs, _rope_cpu its CPU scheduling), rope_nd (positions on several
axes), rope_scaling (and per-layer RoPE), and the slow rope_reference that shares no code with
them; the attention kinds (attention_kinds: one record per kind; attention, the full forms;
attention_step, the decode steps; attention_core, what both share; feature_maps); positions
(the table of position encodings); model_config and model (the encoder); heads (task heads);
decoding (generation). Pure functions over arrays; Flax modules own the parameters and call
them."""
