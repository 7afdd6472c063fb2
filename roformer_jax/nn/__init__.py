"""The math and the model, floor by floor: rope (the formula; _rope_exact its exact, fast path,
rope_phase the exact angles, rope_layouts the pairs), rope_nd (positions on several
axes), rope_scaling (and per-layer RoPE), and the slow rope_reference that shares no code with
them; the attention kinds (attention_kinds: one record per kind; attention, the full forms;
attention_step, the decode steps; attention_core, what both share; feature_maps); positions
(the table of position encodings); sections (the hyperparameters of a table's entry, frozen);
model_config and model (the encoder); heads (task heads);
decoding (generation). Pure functions over arrays; Flax modules own the parameters and call
them."""
