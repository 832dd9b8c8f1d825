"""The per-cell timeout of a Python kernel (pacheck.Kernel(timeout=...)): a timer that, when a call runs past its
limit, raises CellTimeout in the thread that runs the kernel (CPython's PyThreadState_SetAsyncExc).

What it can stop: Python code, and native code at its next return to the interpreter (between two NumPy
operations, after a torch call returns). What it cannot: a kernel blocked inside one native call that never
returns (a GPU kernel that hangs the device, a deadlock in C); such a call is reported as `timeout` once it
returns, and a process that must never hang runs the kernel through `pacheck export` / `score` in another
process instead (docs/PYTHON.md).
"""
import ctypes
import threading
import time


class CellTimeout(BaseException):
    """Raised inside a Python kernel's run() when its cell's timeout passed. A BaseException, so a kernel's own
    `except Exception` does not swallow it."""


class Watchdog:
    """One call's timer: start(), the call, stop(); `fired` tells whether the limit passed during the call."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.fired = False
        self._lock = threading.Lock()
        self._running = False
        self._timer = None
        self._thread = threading.get_ident()
        self.t0 = 0.0

    def start(self):
        self.t0 = time.monotonic()
        if not self.seconds or self.seconds <= 0:
            return
        self._running = True
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self):
        with self._lock:
            if not self._running:
                return
            self.fired = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), ctypes.py_object(CellTimeout))

    def stop(self):
        """Ends the watch: no exception is raised after this returns (one pending is cleared)."""
        if self._timer is None:
            return
        with self._lock:
            self._running = False
            if self.fired:  # raised, or pending: clear one not yet delivered
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), None)
        self._timer.cancel()

    def elapsed(self):
        return time.monotonic() - self.t0

    def over(self):
        """The call took longer than the limit (whether or not the exception reached it)."""
        return bool(self.seconds) and self.seconds > 0 and (self.fired or self.elapsed() > self.seconds)
