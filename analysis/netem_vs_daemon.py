"""netem against the linkdelay daemon on one kernel: ``python -m analysis.netem_vs_daemon
NETEM_DIR DAEMON_DIR --out DIR``.

The daemon (repronet/emu/linkdelay) exists because the development machine's kernel has no
sch_netem; the claim worth making is that it delays, jitters and drops like netem does. The
only fair test is both on the same kernel, the same machine and the same sizes, which the VM
(vagrant/vm.py, Debian's stock kernel) gives: two runs of topologies/fidelity.py, one with
``--links netem`` and one with ``--links linkdelay``, in one boot. Whatever the VM itself adds
(software-emulated CPU) is in both columns, so their difference is the mechanisms'.

Reads only each folder's ``manifest.json`` and ``tables/`` (rtt, loss, goodput; what
``repronet analyse`` wrote), never logs, never the emulator. One row per measure and configured
point (delay, jitter, loss, rate; the measures and keys of ``analysis.crosscheck_tables``):
configured, measured with netem, measured with the daemon (means over repetitions), each over
configured, and daemon / netem. Refused with one sentence: a folder that is not an analysed
fidelity run, or whose links used another mechanism than its side says.

Writes ``DIR/tables/netem_vs_daemon.csv`` and ``DIR/report.md`` (the table as markdown, with
both runs' kernel, commit and CPU verdict), and prints the markdown table.
"""

import math
import pathlib
import sys

import pandas as pd

from analysis import crosscheck, inputs
from analysis.crosscheck_tables import FIDELITY, groups, ratio, stats, _order, _setting
from analysis.tables import nan, write_tables
from repronet.usage import UsageParser

FLOAT = '%.6g'
SIDES = (('netem', 'NETEM_DIR'), ('linkdelay', 'DAEMON_DIR'))


class ComparisonError(ValueError):
    """The two folders cannot be compared; the message is one sentence."""


def load(run_dir, mechanism, option):
    """(manifest, tables) of an analysed fidelity run whose links used mechanism."""
    try:
        manifest = inputs.read_manifest(run_dir)
    except inputs.InputError as e:
        raise ComparisonError(str(e)) from None
    if manifest.get('experiment') != 'fidelity':
        raise ComparisonError('%s is a %s run; %s must be a fidelity run' % (
            run_dir, manifest.get('experiment'), option))
    used = {r.get('mechanism') for r in (manifest.get('mechanisms') or {}).get('links') or []}
    shaped = sorted(m for m in used if m and m not in ('none', 'htb'))
    if not shaped or any(mechanism not in m for m in shaped):
        raise ComparisonError('%s delayed its links with %s, but %s must be a run with '
                              '--links %s' % (run_dir, ', '.join(shaped) or 'nothing',
                                              option, mechanism))
    try:
        return manifest, crosscheck._tables(run_dir, 'fidelity')
    except crosscheck.CrosscheckError as e:
        raise ComparisonError(str(e)) from None


def table(netem_tables, daemon_tables):
    """One row per measure and configured point: configured, netem, daemon, ratios."""
    rows = []
    for measure, name, keys, configured, measured, kinds in FIDELITY:
        sides = []
        for t in (netem_tables, daemon_tables):
            df = t.get(name)
            if df is not None and kinds is not None and 'kind' in df.columns:
                df = df[df['kind'].isin(kinds)]
            sides.append(groups(df, keys))
        for key in sorted(set(sides[0]) | set(sides[1]), key=_order):
            got = [stats(s[key], measured) if key in s else (math.nan,) * 4 + (0,)
                   for s in sides]
            conf = stats(next(s[key] for s in sides if key in s), configured)[0]
            rows.append({'measure': measure, 'shape': key[0], 'kind': key[1],
                         'setting': _setting(keys, key), 'configured': conf,
                         'netem': got[0][0], 'netem_repeats': got[0][4],
                         'daemon': got[1][0], 'daemon_repeats': got[1][4],
                         'netem_over_configured': ratio(got[0][0], conf),
                         'daemon_over_configured': ratio(got[1][0], conf),
                         'daemon_over_netem': ratio(got[1][0], got[0][0])})
    return pd.DataFrame(rows)


def markdown(df):
    """The table as markdown, numbers to 3 significant digits, '-' where not measured."""
    cols = ['measure', 'shape', 'kind', 'setting', 'configured', 'netem', 'daemon',
            'daemon_over_netem']
    lines = ['| ' + ' | '.join(c.replace('_', ' ') for c in cols) + ' |',
             '|' + '---|' * len(cols)]
    for _, row in df.iterrows():
        lines.append('| ' + ' | '.join(
            ('-' if nan(row[c]) else '%.3g' % row[c]) if isinstance(row[c], float)
            else str(row[c]) for c in cols) + ' |')
    return '\n'.join(lines)


def _describe(label, run_dir, manifest):
    """One line per run: folder, kernel, commit, CPU verdict."""
    prov = manifest.get('provenance') or {}
    kernel = (prov.get('kernel') or {}) if isinstance(prov.get('kernel'), dict) else {}
    git = prov.get('git') or {}
    cpu = manifest.get('cpu') or {}
    return '- %s: `%s`, kernel %s, commit %s%s, CPU %s' % (
        label, run_dir, kernel.get('release', prov.get('kernel')),
        (git.get('revision') or '?')[:7], ' (dirty)' if git.get('dirty') else '',
        'saturated in some points' if cpu.get('saturated') else 'not saturated')


def build(netem_dir, daemon_dir, out_dir):
    """Write DIR/tables/netem_vs_daemon.csv and DIR/report.md; return the table."""
    out_dir = pathlib.Path(out_dir)
    for run_dir in (netem_dir, daemon_dir):
        if out_dir.resolve() == pathlib.Path(run_dir).resolve():
            raise ComparisonError('--out %s is one of the two runs; give a folder of its own'
                                  % out_dir)
    (netem_m, netem_t), (daemon_m, daemon_t) = [
        load(d, mech, opt) for d, (mech, opt) in zip((netem_dir, daemon_dir), SIDES)]
    df = table(netem_t, daemon_t)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_tables(out_dir, {'netem_vs_daemon': df}, FLOAT)
    text = '\n'.join(['# netem against the linkdelay daemon', '',
                      _describe('netem', netem_dir, netem_m),
                      _describe('daemon', daemon_dir, daemon_m), '', markdown(df), ''])
    (out_dir / 'report.md').write_text(text)
    return df


def main(argv=None):
    """Command line: compare, print the table; exit 1 with one sentence on refusal."""
    parser = UsageParser(
        tool='analysis.netem_vs_daemon',
        prog='python -m analysis.netem_vs_daemon',
        description='Two fidelity runs on one kernel, --links netem and --links linkdelay: '
                    'configured against netem against the daemon, per configured point.')
    parser.add_argument('netem_dir', metavar='NETEM_DIR', help='fidelity run, --links netem')
    parser.add_argument('daemon_dir', metavar='DAEMON_DIR',
                        help='fidelity run, --links linkdelay')
    parser.add_argument('--out', required=True, metavar='DIR',
                        help='folder for tables/netem_vs_daemon.csv and report.md')
    args = parser.parse_args(argv)
    try:
        df = build(args.netem_dir, args.daemon_dir, args.out)
    except ComparisonError as e:
        print('netem_vs_daemon: %s' % e, file=sys.stderr)
        return 1
    print(markdown(df))
    print('netem_vs_daemon: table and report.md in %s' % args.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
