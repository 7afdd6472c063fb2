"""A persistent compilation cache for one test module: runs of one config compile once.

Test modules that train the same tiny config several times (~10 s of compiling each on CPU)
call `start` in setUpModule and `stop` in tearDownModule.
"""

import os

import jax
from jax.experimental.compilation_cache import compilation_cache


def start(directory: str) -> None:
    jax.config.update("jax_compilation_cache_dir", os.path.join(directory, "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def stop() -> None:
    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
