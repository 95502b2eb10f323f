"""CPU idle states during an emulated run (issue 15): the flag, the record, the machine line.

``repronet.emu.cpuidle`` keeps the CPUs out of sleeping idle states while a network runs
(``--cpu-idle poll``, the default) or leaves them to the kernel (``os``). These tests need no
root: what the request does to the kernel is in ``test_cpu_idle_root.py``.
"""

import pytest

from analysis import machine
from repronet.emu import cpuidle
from repronet.run import options
from tests.test_links_option import _Exp

HOST = {'provenance': {'host': {'cpus': 2, 'memory_bytes': 2 ** 34}}}


def _record(mode='poll', effect='in force: only idle states with no exit latency (C1 kept out)',
            slept=0):
    return {'mode': mode, 'request': '/dev/cpu_dma_latency = 0 us', 'effect': effect,
            'states': {'POLL': {'exit_latency_us': 0, 'entered_during_run': 900},
                       'C1': {'exit_latency_us': 1, 'entered_during_run': slept}}}


def test_the_flag_defaults_to_the_kernel_choice_only_when_asked():
    """No flag: None (the runner then asks for poll); poll and os parse; anything else is a
    UsageError; a simulated run refuses the flag in one sentence."""
    assert options.parse(_Exp(), []).cpu_idle is None
    for mode in cpuidle.MODES:
        assert options.parse(_Exp(), ['--cpu-idle', mode]).cpu_idle == mode
    with pytest.raises(options.UsageError):
        options.parse(_Exp(), ['--cpu-idle', 'deep'])
    params = options.parse(_Exp(), ['--backend', 'sim', '--cpu-idle', 'poll'])
    with pytest.raises(options.UsageError) as info:
        options.check_shared(params)
    assert 'a simulated run has no CPUs to keep awake' in str(info.value)
    assert options.CPU_IDLE == cpuidle.MODES


def test_an_unknown_mode_is_refused_before_anything_is_held():
    with pytest.raises(ValueError, match='must be one of poll, os'):
        cpuidle.IdleHold('deep')


def test_a_request_that_cannot_be_held_is_recorded_not_fatal(tmp_path, monkeypatch):
    """A kernel without the device (or no permission): the run goes on and its record and
    machine line say the CPUs were not kept awake, and why."""
    monkeypatch.setattr(cpuidle, 'PATH', str(tmp_path / 'no-such-device'))
    hold = cpuidle.IdleHold('poll').start()
    hold.stop()
    record = hold.record()
    assert record['effect'].startswith('not in force: cannot hold ')
    assert record['in_force_us'] is None
    assert machine.idle({'cpu_idle': record}).startswith('CPUs not kept awake (not in force')


def test_os_mode_holds_nothing_and_counts_what_the_kernel_chose():
    hold = cpuidle.IdleHold('os').start()
    assert hold._file is None
    hold.stop()
    record = hold.record()
    assert record['mode'] == 'os' and record['request'] is None
    assert record['effect'] == 'none asked: the kernel chose idle states'


def test_the_machine_line_says_whether_the_cpus_were_kept_awake():
    """In force and no sleeps: one clause; sleeps despite the request are counted; os mode
    counts its sleeps; a run without the record (older, simulated) adds nothing."""
    text = machine.describe(dict(HOST, cpu_idle=_record()))
    assert text == ('2 CPUs, 16.0 GiB memory; CPUs kept out of sleeping idle states (PM QoS, '
                    '/dev/cpu_dma_latency = 0 us)')
    assert machine.idle({'cpu_idle': _record(slept=1)}).endswith('; yet 1 sleep during the run)')
    assert machine.idle({'cpu_idle': _record('os', 'none asked', slept=42)}) == \
        'CPUs free to sleep when idle (--cpu-idle os; 42 sleeps during the run)'
    assert machine.describe(HOST) == '2 CPUs, 16.0 GiB memory'
    assert machine.describe(dict(HOST, cpu_idle=None)) == '2 CPUs, 16.0 GiB memory'


def test_the_machine_line_names_other_servers_the_request_missed():
    """A cluster run's record carries each other server's: all in force is one short clause;
    one that could not hold it (or never reported) is named with why."""
    record = dict(_record(), servers={'vm2': _record()})
    assert machine.idle({'cpu_idle': record}).endswith('0 us) (the same on 1 other server)')
    record['servers']['vm3'] = {'effect': 'not in force: cannot hold /dev/cpu_dma_latency'}
    record['servers']['vm4'] = None
    assert machine.idle({'cpu_idle': record}).endswith(
        '(not on vm3, vm4: not in force: cannot hold /dev/cpu_dma_latency; not recorded)')
