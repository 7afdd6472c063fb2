"""Tests for roformer_jax/data/prefetch.py: batches made ahead in a background thread."""

import threading
import time

from absl.testing import absltest, parameterized

from roformer_jax.data.prefetch import prefetched


class PrefetchedTest(parameterized.TestCase):
    @parameterized.parameters(0, 1, 3)
    def test_yields_make_of_each_step_in_order(self, depth):
        it = prefetched(lambda step: {"step": step}, 5, depth)
        self.assertEqual([next(it)["step"] for _ in range(6)], [5, 6, 7, 8, 9, 10])
        it.close()

    def test_an_error_in_the_thread_reaches_the_consumer(self):
        def make(step):
            if step == 2:
                raise RuntimeError("bad batch 2")
            return step

        it = prefetched(make, 0, 2)
        self.assertEqual([next(it), next(it)], [0, 1])
        with self.assertRaisesRegex(RuntimeError, "bad batch 2"):
            next(it)

    def test_close_stops_the_thread(self):
        made, before = [], set(threading.enumerate())
        it = prefetched(lambda step: made.append(step) or step, 0, 2)
        next(it)
        time.sleep(0.3)  # the worker fills the queue and waits to put the next batch
        it.close()
        time.sleep(0.5)  # the worker notices the stop within its 0.1 s put timeout
        count = len(made)
        time.sleep(0.3)
        self.assertEqual(len(made), count)
        self.assertFalse(set(threading.enumerate()) - before)


if __name__ == "__main__":
    absltest.main()
