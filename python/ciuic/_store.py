"""Rendezvous through a Python key/value store (torch.distributed's store).

The library calls the adapter from the caller's thread and from its progress
thread (with the GIL taken), with timeouts in seconds.
"""

import datetime
import threading


class StoreAdapter:
    """Keys of one context under `prefix` in `store`, a torch.distributed
    Store or any object with set(key, bytes), get(key) -> bytes,
    add(key, int) -> int and wait(keys, timedelta).

    Each thread gets its own clone of a torch store: a TCPStore client runs
    one request at a time, so a wait on one thread would hold up a set from
    another (and a peer waiting for that set)."""

    def __init__(self, store, prefix):
        self._base = store
        self._prefix = prefix
        self._local = threading.local()

    def _store(self):
        s = getattr(self._local, "store", None)
        if s is None:
            s = self._base
            clone = getattr(self._base, "clone", None)
            if clone is not None:
                try:
                    s = clone()
                except Exception:  # a store that cannot clone is shared
                    s = self._base
            self._local.store = s
        return s

    def set(self, key, value):
        self._store().set(self._prefix + key, value)

    def get(self, key, timeout):
        self.wait([key], timeout)
        value = self._store().get(self._prefix + key)
        return bytes(value)

    def wait(self, keys, timeout):
        # torch treats a zero timeout as "do not wait"; never pass it.
        limit = datetime.timedelta(seconds=max(float(timeout), 0.001))
        try:
            self._store().wait([self._prefix + k for k in keys], limit)
        except Exception as e:  # torch: DistStoreError / RuntimeError on expiry
            text = str(e)
            if "imeout" in text or "timed out" in text or type(e).__name__ == "DistStoreError":
                raise TimeoutError(f"keys {keys} not set within {timeout:.1f} s: {text}") from e
            raise

    def add(self, key, delta):
        return int(self._store().add(self._prefix + key, int(delta)))
