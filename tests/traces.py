"""The functions JAX traces for jit inside a block, counted by name: what tests of reuse
(a second run of one model traces nothing) and of retracing read."""

import collections
import contextlib

import jax

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


@contextlib.contextmanager
def counted():
    """Yields a Counter, filled as the block runs: function name -> traces."""
    traced = collections.Counter()

    def listen(event, duration, fun_name="?", **kwargs):
        if event == _TRACE_EVENT:
            traced[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield traced
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
