"""What a run's manifest says about the machine it ran on, in one sentence for reports.

Reports describe the machine from ``manifest['provenance']['host']`` (recorded by
``repronet.run.provenance.host`` when the run started), never from what the machine of the
person who wrote the analysis happened to be: the same analysis reads runs from many machines.

Every report's machine line also says whether the machine kept the emulated delays (issue 15):
the linkdelay daemons' mean and worst lateness next to the configured holds, from the
manifest's ``link_holds`` (``repronet.emu.linkemu_daemon.DaemonSet.holds``), and a MARKED when
the mean exceeds the stated share of the smallest hold, with the least and most late point
(``link_holds['points']``); and it names any daemon that left the
real-time class during the run (it ran its RLIMIT_RTTIME budget without sleeping and was late
from then on), which would otherwise only show as a late figure. It says whether the CPUs
were kept out of sleeping idle states (manifest ``cpu_idle``, ``repronet.emu.cpuidle``), since
a CPU woken from a halt adds tens of microseconds to every operation at LAN delays, and which
CPUs were set apart for the daemons (``mechanisms.link_cpus``, ``--link-cpus``), since the hosts
then ran on fewer; the CPU sample that held the daemons' worst release (how much the
hypervisor took of each CPU then: a lone release milliseconds late is the VM stalling as often
as the daemon); and how much CPU time a hypervisor took from the machine (steal, from the
CPU sampler), since on a shared VM a burst of it stalls every host and daemon on that CPU at
once and shows up as lateness and slow operations no link or node caused. One place, so every
experiment's report says it.
"""

from analysis.inputs import as_dict, is_number
from repronet.emu.linkemu_holds import late_bound_us


def host(manifest):
    """The manifest's host record ({} when the run did not record one)."""
    record = (manifest.get('provenance') or {}).get('host')
    return record if isinstance(record, dict) else {}


def describe(manifest):
    """'4 CPUs (2 usable by the run), 7.8 GiB memory, <model>' from the manifest."""
    info = host(manifest)
    late = '; '.join(filter(None, [holds(manifest), idle(manifest), steal(manifest)]))
    if not info:
        return 'machine not recorded in the manifest' + ('; ' + late if late else '')
    cpus, usable = info.get('cpus'), info.get('cpus_usable')
    parts = ['%s CPUs' % (cpus if cpus is not None else 'unknown number of')]
    if usable is not None and usable != cpus:
        parts[0] += ' (%d usable by the run)' % usable
    parts[0] += link_cpus(manifest)
    memory = info.get('memory_bytes')
    parts.append('%.1f GiB memory' % (memory / 2 ** 30) if memory else 'memory unknown')
    if info.get('cpu_model'):
        parts.append(str(info['cpu_model']))
    return ', '.join(parts) + ('; ' + late if late else '')


def link_cpus(manifest):
    """' (CPU 1 set apart for the link delay daemons, the hosts on CPU 0)' when the run set CPUs
    apart (``--link-cpus``, ``repronet.emu.linkcpus``), else ''."""
    record = as_dict(manifest.get('mechanisms')).get('link_cpus')
    if not isinstance(record, dict) or not is_number(record.get('reserved')) \
            or not record['reserved']:
        return ''
    return ' (CPU %s set apart for the link delay daemons, the hosts on CPU %s)' % (
        record.get('daemons'), record.get('rest'))


def holds(manifest):
    """The delay daemons' lateness against the configured holds, one clause ('' if none)."""
    record = manifest.get('link_holds')
    if not isinstance(record, dict) or not is_number(record.get('hold_us_min')):
        return ''
    mean, worst = record.get('late_us_mean'), record.get('late_us_max')
    if not is_number(mean):
        return 'link delay daemons: lateness not recorded'
    share, hold = record.get('late_share'), record['hold_us_min']
    longest = record.get('hold_us_max') or hold
    text = ('link delay daemons released packets %.1f us late on average, %s us at most, '
            'against configured holds of %s us' % (
                mean, '%.0f' % worst if is_number(worst) else '?',
                '%g' % hold if longest == hold else '%g to %g' % (hold, longest)))
    if is_number(record.get('serial_us_mean')):
        text += (' after each packet\'s time on the rated links (%.1f us on average, timed '
                 'by the daemons)' % record['serial_us_mean'])
    text += _spread(record)
    if is_number(share) and mean > share * hold:
        text += (' (MARKED: the mean exceeds %g %% of the smallest hold, so the emulated '
                 'delays were longer than configured)' % (100 * share))
    text += _daemon_cpu(record.get('daemons'))
    text += _by_point(record.get('points'))
    text += _worst_sample(record)
    demoted = record.get('rt_demoted') or []
    if demoted:
        text += ('; %d of %d daemons (%s) left SCHED_FIFO during the run (they ran their '
                 'real-time budget without sleeping) and ran SCHED_OTHER from then on' % (
                     len(demoted), len(record.get('daemons') or demoted),
                     ', '.join(map(str, demoted))))
    return text


def _spread(record):
    """' (99 % of packets under N us late; M us of the mean from packets read after their
    deadline)' from the daemons' histogram and split ('' from runs before they had them)."""
    hist, read = record.get('late_hist_log2_us'), record.get('late_read_us_mean')
    bits = []
    if hist:
        bounds = [(q, late_bound_us(hist, q)) for q in (0.5, 0.99)]
        bits.append(', '.join('%g %% of packets %s' % (100 * q, 'under %d us late' % b if b
                                                        else '16 ms late or more')
                              for q, b in bounds))
    if is_number(read):
        bits.append('%.1f us of the mean from packets the daemons read after their deadline'
                    % read)
    return ' (%s)' % '; '.join(bits) if bits else ''


def _by_point(points):
    """'; by point, the mean ran from 3.1 us (point 4) to 41.2 us (point 17)' from the split
    of ``link_holds['points']`` (linkemu_holds.by_seed; '' with fewer than two points)."""
    rows = [p for p in points or () if isinstance(p, dict) and p.get('released')
            and is_number(p.get('late_us_mean'))]
    if len(rows) < 2:
        return ''
    low = min(rows, key=lambda p: p['late_us_mean'])
    high = max(rows, key=lambda p: p['late_us_mean'])

    def name(p):
        return 'point %s' % p['point'] if p.get('point') is not None else 'seed %s' % p['seed']
    return '; by point, the mean ran from %.1f us (%s) to %.1f us (%s)' % (
        low['late_us_mean'], name(low), high['late_us_mean'], name(high))


def _worst_sample(record):
    """'; the worst release (s2's daemon) fell in a CPU sample in which the hypervisor took
    6 % of CPU 1 and 0 % of CPU 0' from ``late_max_sample`` ('' without one)."""
    sample = record.get('late_max_sample')
    if not isinstance(sample, dict):
        return ''
    host = record.get('late_max_host')
    who = ' (%s\'s daemon)' % host if host else ''
    # each CPU keeps its own index: a core without a reading must not renumber the rest
    steal = [(v, i) for i, v in enumerate(sample.get('core_steal') or []) if is_number(v)]
    busy = [v for v in sample.get('cores') or [] if is_number(v)]
    if steal and any(v for v, _ in steal):
        return ('; the worst release%s fell in a CPU sample in which the hypervisor took %s'
                % (who, ' and '.join(_share_of(v, i) for v, i in steal)))
    if steal:
        return ('; the worst release%s fell in a CPU sample with no steal (CPUs %s busy)'
                % (who, ' / '.join('%.0f %%' % (100 * v) for v in busy)))
    return ''


def _daemon_cpu(rows):
    """', using N CPU seconds (M on other servers)' from the daemons' rows ('' without)."""
    rows = [r for r in rows or [] if isinstance(r, dict) and is_number(r.get('cpu_s'))]
    if not rows:
        return ''
    remote = [r['cpu_s'] for r in rows if r.get('server') not in (None, 'localhost')]
    return ', using %.2f CPU seconds%s' % (
        sum(r['cpu_s'] for r in rows),
        ' (%.2f of them on other servers)' % sum(remote) if remote else '')


def idle(manifest):
    """Whether the CPUs were kept awake during the run, one clause ('' if not recorded)."""
    record = manifest.get('cpu_idle')
    if not isinstance(record, dict):
        return ''
    slept = sum(state.get('entered_during_run') or 0
                for state in (record.get('states') or {}).values()
                if isinstance(state, dict) and (state.get('exit_latency_us') or 0) > 0)
    if record.get('mode') == 'os':
        return 'CPUs free to sleep when idle (--cpu-idle os; %s during the run)' % _sleeps(slept)
    effect = str(record.get('effect') or '')
    if not effect.startswith('in force'):
        return 'CPUs not kept awake (%s)' % effect + _servers(record)
    return ('CPUs kept out of sleeping idle states (PM QoS, %s%s)' % (
        record.get('request'), '; yet %s during the run' % _sleeps(slept) if slept else '')
        + _servers(record))


def _servers(record):
    """' (the same on N other servers)' or which other servers the request missed."""
    servers = record.get('servers')
    if not isinstance(servers, dict) or not servers:
        return ''
    missed = sorted(name for name, r in servers.items()
                    if not str((r or {}).get('effect') or '').startswith('in force'))
    if not missed:
        return ' (the same on %d other server%s)' % (len(servers), 's' * (len(servers) > 1))
    return ' (not on %s: %s)' % (', '.join(missed), '; '.join(
        str((servers[name] or {}).get('effect') or 'not recorded') for name in missed))


def steal(manifest):
    """'the hypervisor took 0.6 % of the judged CPUs' time (steal), 32 % of CPU 0's worst 0.5 s
    sample', one clause; '' when the sampler saw none or the run recorded no samples."""
    cpu = as_dict(manifest.get('cpu'))
    mean = cpu.get('steal_mean')
    per_core = [(v, i) for i, v in enumerate(cpu.get('core_steal_max') or []) if is_number(v)]
    worst = max(per_core) if per_core else None
    if not is_number(mean) or (not mean and not (worst and worst[0])):
        return ''
    text = 'the hypervisor took %.1f %% of the %sCPU time (steal)' % (
        100 * mean, 'hosts\' ' if cpu.get('judged_cpus') else '')
    if worst and worst[0]:
        text += ', %s\'s worst %g s sample' % (
            _share_of(*worst, cpu.get('cores') or []), cpu.get('interval') or 0)
    return text


def _share_of(fraction, index, names=()):
    """'32 % of CPU 0': a fraction of the index-th CPU, named as the sampler named it
    (names: 'cpu0', ...) or by its index."""
    name = names[index] if index < len(names) else 'cpu%d' % index
    return '%.0f %% of %s' % (100 * fraction, str(name).replace('cpu', 'CPU '))


def _sleeps(count):
    return '%d sleep%s' % (count, '' if count == 1 else 's')
