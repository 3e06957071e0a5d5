"""Ctrl-C that is not lost. Python turns SIGINT into KeyboardInterrupt wherever the main thread is; when
that is a weakref callback or a `__del__`, the exception is printed ("Exception ignored in ...") and
dropped, and a run would go on as if nothing was pressed. `caught()` records the signal as well, and the
runner calls `check()` between questions and cells, so a dropped Ctrl-C stops the run there; `dkilab.cli.main`
checks once more as a command ends, so one dropped after the last cell still exits 130. While `caught()` is
active, Python's own report of the dropped KeyboardInterrupt is not printed: the press is not lost, so the
"Exception ignored ... Traceback" would tell the user something false (a hook someone installed still gets it)."""
import contextlib
import signal
import sys
import threading

_pressed = False


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came while `caught()` was active, even if it was swallowed."""
    if _pressed:
        raise KeyboardInterrupt


@contextlib.contextmanager
def caught():
    """Within: SIGINT is recorded and raises KeyboardInterrupt as usual. Outside: the previous handler, and
    nothing recorded (so an in-process caller's next run starts clean). A no-op off the main thread or
    where SIGINT is not Python's default handler (ignored, or someone else's)."""
    global _pressed
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_sigint(signum, frame):
        global _pressed
        _pressed = True
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def on_unraisable(unraisable):
        if not (_pressed and isinstance(unraisable.exc_value, KeyboardInterrupt)
                and previous_hook is sys.__unraisablehook__):
            previous_hook(unraisable)

    _pressed = False
    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = on_unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous_hook
        _pressed = False
