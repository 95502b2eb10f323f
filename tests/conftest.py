"""Shared test machinery: the `root` tier and the machine-wide Mininet lock.

Tests marked ``@pytest.mark.root`` build real Mininet networks, so they need root, Debian's
Mininet (importable by this interpreter: run pytest with /usr/bin/python3) and a running
Open vSwitch. Where that is missing they are skipped with the reason, except in CI
(``CI=true``): CI exists to run them, so there a missing requirement FAILS the test instead
of letting a green run hide that nothing was emulated.

Two emulations on one machine share its CPUs, interface names and OVS, so every root test
holds the machine-wide lock ``/run/repronet.lock`` (``fcntl.flock``, the same lock the
runner and ad-hoc ``flock /run/repronet.lock CMD`` use). An experiment a root test starts
as a child process must not wait for that lock again: the runner sees in ``/proc/locks``
that an ancestor (this pytest process) holds it and runs under it
(``repronet.run.leftovers.machine_lock``). Do not call an experiment's ``main()`` inside the
pytest process from a root test; start it as a subprocess. ``REPRONET_LOCK_HELD=1`` is set
in the environment while the lock is held, for tools that want to know.
"""

import fcntl
import functools
import os
import time

import pytest

LOCK_PATH = '/run/repronet.lock'
LOCK_ENV = 'REPRONET_LOCK_HELD'


def in_ci():
    """True when running under CI (CI=true/1/yes)."""
    return os.environ.get('CI', '').strip().lower() in ('true', '1', 'yes')


def root_missing():
    """Why root tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return 'needs root (run the tests as root or with sudo)'
    try:
        import mininet.net  # noqa: F401  (Debian's module, system interpreter only)
    except ImportError:
        return ('needs Mininet importable by this interpreter; run pytest with '
                '/usr/bin/python3 after vagrant/provision.sh')
    from repronet.emu import capabilities
    caps = capabilities.probe()
    if not caps.ovs_user:
        return 'needs Open vSwitch: ' + capabilities.explain('ovs_user', caps)
    return None


def pytest_report_header(config):
    """Show the capability probe at the top of every test run."""
    from repronet.emu import capabilities
    caps = capabilities.probe()
    have = [f for f in capabilities.FEATURES if getattr(caps, f)]
    return ['repronet capabilities (%s): %s' % ('root' if caps.root else 'not root',
                                                ', '.join(have) or 'none'),
            'CI mode: %s (missing root requirements fail instead of skip)' % in_ci()]


@functools.lru_cache(maxsize=None)
def vm_kernel_missing():
    """Why `vm_kernel` tests cannot run here (no sch_netem or no openvswitch module), or None."""
    from repronet.emu import capabilities
    caps = capabilities.probe()
    lacking = [f for f in ('netem', 'ovs_kernel') if not getattr(caps, f)]
    if lacking:
        return 'needs %s (Debian\'s stock kernel); tests/test_vm_root.py runs this test in ' \
               'the VM (vagrant/vm.py)' % ' and '.join(lacking)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Skip (or, in CI, fail) root tests whose requirements are missing.

    `vm_kernel` tests need the stock kernel: skipped where it is missing, even in CI (CI runs
    them inside the VM), but inside vagrant/vm.py (REPRONET_VM set) a missing one fails."""
    if item.get_closest_marker('root') is None:
        return
    if item.get_closest_marker('vm_kernel') is not None and root_missing() is None:
        reason = vm_kernel_missing()
        if reason and os.environ.get('REPRONET_VM'):
            pytest.fail('inside the VM but this test cannot run: ' + reason, pytrace=False)
        if reason:
            pytest.skip(reason)
    reason = root_missing()
    if reason is None:
        return
    if in_ci():
        pytest.fail('CI=true but this root test cannot run: ' + reason, pytrace=False)
    pytest.skip(reason)


class MachineLock:
    """The machine-wide Mininet lock, held through one open file description."""

    def __init__(self, path=LOCK_PATH):
        self.path = path
        self._fd = None

    def acquire(self, on_wait=None):
        """Block until the lock is ours; call on_wait() once if we have to wait."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self):
        """Release the lock (closing the descriptor drops it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Hold /run/repronet.lock around each runnable root test (setup to teardown).

    The outermost wrapper, so waiting for another run's lock does not count against
    pytest-timeout's per-test limit, which starts inside it.
    """
    if item.get_closest_marker('root') is None or root_missing() is not None:
        yield
        return
    reporter = item.config.pluginmanager.get_plugin('terminalreporter')

    def on_wait():
        if reporter is not None:
            reporter.write_line('\n[repronet] %s is held by another Mininet run; '
                                'waiting before %s' % (LOCK_PATH, item.nodeid))
    lock = MachineLock()
    started = time.monotonic()
    lock.acquire(on_wait)
    waited = time.monotonic() - started
    if waited > 1 and reporter is not None:
        reporter.write_line('[repronet] got %s after %.0f s' % (LOCK_PATH, waited))
    previous = os.environ.get(LOCK_ENV)
    os.environ[LOCK_ENV] = '1'
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(LOCK_ENV, None)
        else:
            os.environ[LOCK_ENV] = previous
        lock.release()
