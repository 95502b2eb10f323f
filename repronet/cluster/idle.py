"""The CPU idle-state request on every other server of a cluster run (issue 15).

``repronet.emu.cpuidle`` keeps this machine's CPUs out of sleeping idle states for the run;
a host placed on another server needs the same there, or its packets pay a halted CPU's
wake-up that this machine's do not. Each server runs ``python3 -m repronet.emu.cpuidle MODE``
over an ssh connection of its own (not the control master: when that connection ends, sshd
closes the process's stdin and the request goes with it, so a SIGKILLed runner leaves none).
``stop()`` closes stdin and keeps the record the process prints: the manifest's
``cpu_idle.servers``.
"""

import json
import selectors
import subprocess

from repronet.cluster.ssh import PYTHON, REPO, ClusterError, spawn


class RemoteIdle:
    """One server's hold: start() waits until it is in force, stop() returns its record."""

    def __init__(self, machine, mode):
        self.machine, self.mode = machine, mode
        self.proc = None
        self.record = None

    def start(self, timeout=30):
        command = ['env', 'PYTHONPATH=' + str(REPO), PYTHON, '-m', 'repronet.emu.cpuidle',
                   self.mode]
        self.proc = spawn(self.machine.argv(command, mux=False), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = _line(self.proc, timeout)
        if line.get('event') != 'held':
            self.stop()
            raise ClusterError('server %s: the CPU idle-state request did not start: %s' % (
                self.machine.name, line.get('error') or line))
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stop(self, timeout=15):
        """End the hold (idempotent); its record, or one saying why there is none."""
        if self.proc is None or self.record is not None:
            return self.record
        try:
            out, err = self.proc.communicate('', timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        lines = [json.loads(t) for t in out.splitlines() if t.startswith('{')]
        self.record = next((r for r in lines if r.get('event') == 'record'), None) or {
            'mode': self.mode, 'effect': 'not recorded: %s' % (err.strip()[-200:] or
                                                             'exit %s' % self.proc.returncode)}
        self.record.pop('event', None)
        return self.record


def _line(proc, timeout):
    """The first JSON line the hold prints ({'error': ...} if it ends or says nothing)."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return {'error': 'no answer within %gs' % timeout}
    text = proc.stdout.readline()
    try:
        return json.loads(text)
    except ValueError:
        return {'error': (text.strip() or proc.stderr.read().strip())[-200:] or 'no output'}
