"""Batches made ahead in a background thread, so the host prepares step t + 1 while the
devices run step t."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(make: Callable[[int], dict], start: int, depth: int) -> Iterator[dict]:
    """make(start), make(start + 1), ...; computed `depth` ahead in a daemon thread."""
    if depth == 0:
        yield from map(make, itertools.count(start))
        return
    ready, stop = queue.Queue(maxsize=depth), threading.Event()

    def put(item):
        while not stop.is_set():
            try:
                return ready.put(item, timeout=0.1)
            except queue.Full:
                pass

    def work():
        try:
            for step in itertools.count(start):
                put(make(step))
                if stop.is_set():
                    return
        except BaseException as e:  # handed to the consumer, which re-raises it
            put(_Failure(e))

    threading.Thread(target=work, name="roformer-data", daemon=True).start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
