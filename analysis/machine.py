"""What a run's manifest says about the machine it ran on, in one sentence for reports.

Reports describe the machine from ``manifest['provenance']['host']`` (recorded by
``repronet.run.provenance.host`` when the run started), never from what the machine of the
person who wrote the analysis happened to be: the same analysis reads runs from many machines.
"""


def host(manifest):
    """The manifest's host record ({} when the run did not record one)."""
    record = (manifest.get('provenance') or {}).get('host')
    return record if isinstance(record, dict) else {}


def describe(manifest):
    """'4 CPUs (2 usable by the run), 7.8 GiB memory, <model>' from the manifest."""
    info = host(manifest)
    if not info:
        return 'machine not recorded in the manifest'
    cpus, usable = info.get('cpus'), info.get('cpus_usable')
    parts = ['%s CPUs' % (cpus if cpus is not None else 'unknown number of')]
    if usable is not None and usable != cpus:
        parts[0] += ' (%d usable by the run)' % usable
    memory = info.get('memory_bytes')
    parts.append('%.1f GiB memory' % (memory / 2 ** 30) if memory else 'memory unknown')
    if info.get('cpu_model'):
        parts.append(str(info['cpu_model']))
    return ', '.join(parts)
