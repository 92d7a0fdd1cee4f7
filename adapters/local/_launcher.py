"""What keeps a child from outliving the leader, and gives it exactly one SIGTERM.

Each child runs behind a small launcher, ``python -S -c LAUNCHER ... -- argv...``, a
single-threaded process that stays between the leader and the handler:

    leader (threaded) --fork--> launcher L (one thread) --fork+exec--> handler H

- L sets ``PR_SET_PDEATHSIG`` (Linux) to SIGTERM for itself, checks that its parent is
  still the leader (the race between spawn and ``prctl``), forks H with
  ``PR_SET_PDEATHSIG`` = SIGTERM relative to L, and waits for H.
- The first SIGTERM (or SIGINT, SIGHUP) L receives is forwarded to H once; repeats are
  ignored. ``bound`` seconds later L sends H SIGKILL. L exits with H's status (re-raising
  H's signal, so the leader sees what ended H).
- If L itself dies (only SIGKILL can end it early) H gets its one SIGTERM from the
  kernel: H's parent is L's only thread.

Why a process in between and not the plain way (``prctl`` in a ``preexec_fn``, or a
launcher that ``exec``s the handler):

1. The leader is threaded (gRPC, under the etcd client). A ``preexec_fn`` forces
   ``fork()`` and runs Python in the child before ``exec``; gRPC's fork handlers then
   print ``Other threads are currently calling into gRPC, skipping fork() handlers``, and
   here one such child died with SIGSEGV (-11) before it could ``exec``. Without a
   ``preexec_fn`` subprocess uses ``vfork()``: no fork handlers, no Python in the child.
   L, being single-threaded, can fork safely.
2. The kernel sends the parent-death signal each time a child is re-parented, and a
   dying multi-threaded parent re-parents its children from thread to thread as its
   threads exit (kernel/exit.c, ``forget_original_parent``): a handler ``exec``ed
   directly under the SIGKILLed leader received several SIGTERMs within milliseconds,
   and the second one, arriving after the handler had restored the default action,
   killed it in the middle of its drain. L absorbs the burst and forwards one.

Why not a watchdog: a watchdog thread in the leader dies with the leader (SIGKILL), and
one in each child needs the handler to poll its parent. The launcher needs no change in
the handler and costs one small interpreter per child (``-S``: no site import).

Caveat: the parent-death signal fires when the parent *thread* exits: the leader must
spawn from a thread that lives as long as the children (the event loop's thread; never
from a worker thread of ``anyio.to_thread``, which idles out).

Elsewhere than Linux there is no ``PR_SET_PDEATHSIG``: L still forwards and bounds the
stop, but a SIGKILLed leader leaves its children running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["LAUNCHER", "launch_argv", "parent_death_supported"]

LAUNCHER = """\
import ctypes, os, signal, sys
parent, bound, argv = int(sys.argv[1]), float(sys.argv[2]), sys.argv[4:]
LINUX = sys.platform.startswith("linux")
if LINUX:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

def die_with(signum, expected_parent):
    if LINUX and prctl(1, signum, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        os.write(2, b"shoal launcher: prctl(PR_SET_PDEATHSIG) failed\\n")
        os._exit(127)
    if os.getppid() != expected_parent:
        os.write(2, b"shoal launcher: the leader exited while this process was starting\\n")
        os._exit(1)

STOP = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, STOP)  # held until the forwarder is installed
die_with(signal.SIGTERM, parent)
me = os.getpid()
child = os.fork()
if child == 0:
    try:
        die_with(signal.SIGTERM, me)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
        os.execvp(argv[0], argv)
    except BaseException as exc:
        os.write(2, ("shoal launcher: cannot run %r: %s\\n" % (argv, exc)).encode())
    os._exit(127)
forwarded = False

def forward(signum, frame):
    global forwarded
    if not forwarded:
        forwarded = True
        os.kill(child, signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, bound)

def kill(signum, frame):
    os.write(2, b"shoal launcher: still running after the stop bound: SIGKILL\\n")
    os.kill(child, signal.SIGKILL)

for s in STOP:
    signal.signal(s, forward)
signal.signal(signal.SIGALRM, kill)
signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
_, status = os.waitpid(child, 0)
code = os.waitstatus_to_exitcode(status)
if code < 0:
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
    os.kill(me, -code)
    code = 128 - code
sys.exit(code)
"""


def parent_death_supported() -> bool:
    return sys.platform.startswith("linux")


def launch_argv(
    argv: Sequence[str],
    *,
    stop_bound: float,
    parent: int | None = None,
    python: str | None = None,
) -> list[str]:
    """``argv`` behind the launcher: the command gets one SIGTERM when ``parent``
    (default: this process) dies or the launcher is asked to stop, and SIGKILL
    ``stop_bound`` seconds after that."""
    parent = os.getpid() if parent is None else parent
    python = python or sys.executable
    return [python, "-S", "-c", LAUNCHER, str(parent), repr(float(stop_bound)), "--", *argv]
