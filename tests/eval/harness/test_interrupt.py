"""`interrupt.caught()` takes SIGINT over only where Python's own handler has it: a run started with SIGINT
ignored (`nohup dkilab run &`) must not be stopped by a stray Ctrl-C, nor a thread change the main thread's
handler; where it does take over, the handler and the record are Python's again afterwards."""
import signal
import sys
import threading

import pytest
from dkilab.eval.harness import interrupt


@pytest.fixture
def restore_sigint():
    old = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, old)


def test_an_ignored_sigint_stays_ignored(restore_sigint):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with interrupt.caught():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)  # ignored: nothing raised, nothing recorded
        interrupt.check()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_off_the_main_thread_nothing_changes(restore_sigint):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []

    def worker():
        with interrupt.caught():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]


def test_a_recorded_ctrl_c_raises_at_the_check_and_is_forgotten_after(restore_sigint):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        with interrupt.caught():
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass  # swallowed where it landed, as in a finaliser
            interrupt.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        interrupt.check()  # nothing stays recorded: a notebook's next run in this process is not stopped by it
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C stayed recorded after the command")


def test_a_ctrl_c_dropped_in_a_finaliser_is_not_printed_but_raises_at_the_check(restore_sigint, monkeypatch, capsys):
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own: it prints to stderr
    signal.signal(signal.SIGINT, signal.default_int_handler)

    class Finalised:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # lands here, where Python can only report it and drop it

    class Broken:
        def __del__(self):
            raise ValueError("a finaliser's own error")

    with pytest.raises(KeyboardInterrupt):
        with interrupt.caught():
            Broken()
            assert "ValueError: a finaliser's own error" in capsys.readouterr().err  # other reports still print
            Finalised()
            assert capsys.readouterr().err == ""  # no "Exception ignored ... KeyboardInterrupt" Traceback
            interrupt.check()
    assert sys.unraisablehook is sys.__unraisablehook__
