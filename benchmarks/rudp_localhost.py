#!/usr/bin/python3
"""Reliable-UDP goodput on loopback: the seed's block sizes and the windowed mode.

    /usr/bin/python3 benchmarks/rudp_localhost.py [--size-mb 50] [--blocks 1,8,32,64]

Runs the real sender and receiver processes (``nodes.rudp.send``/``recv``) on 127.0.0.1
for each block size in the seed's one-block-at-a-time mode, then windowed (16 blocks of 32,
paced at --rate), and prints each transfer's goodput as both sides measured it. Loopback
has no loss and a round trip of tens of microseconds, so this measures the cost of the
protocol in Python, not a network: the experiment (issue 12) puts the same programs on
emulated links.
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.usage import UsageParser  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def transfer(path, out, extra):
    """One transfer; return (sender record, receiver record)."""
    recv = subprocess.Popen([sys.executable, '-m', 'nodes.rudp.recv', '--host', '127.0.0.1',
                             '--port', '0', '--out', out, '--once', '--linger', '0.2'],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    port = json.loads(recv.stdout.readline())['port']
    sent = subprocess.run([sys.executable, '-m', 'nodes.rudp.send', '--dst', '127.0.0.1',
                           '--port', str(port), '--file', path] + extra, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    got = recv.communicate(timeout=600)[0].splitlines()
    return json.loads(sent.stdout.splitlines()[-1]), json.loads(got[-1])


def main():
    """Run the transfers and print a table."""
    p = UsageParser(tool='rudp_localhost.py', description=__doc__.split('\n')[0])
    p.add_argument('--size-mb', type=float, default=50.0)
    p.add_argument('--blocks', default='1,8,32,64')
    p.add_argument('--rate', type=float, default=400.0, help='windowed mode: Mbit/s')
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'file.bin')
        with open(path, 'wb') as f:
            f.write(os.urandom(int(args.size_mb * 1e6)))
        out = os.path.join(tmp, 'out')
        os.mkdir(out)
        cases = [('seed B=%s' % b, ['--block', b]) for b in args.blocks.split(',')]
        cases.append(('window 16 x B=32 @ %g' % args.rate,
                      ['--block', '32', '--window', '16', '--rate', str(args.rate)]))
        print('%-26s %10s %10s %8s %8s' % ('mode', 'sender', 'receiver', 'resent',
                                          'seconds'))
        for label, extra in cases:
            s, r = transfer(path, out, extra)
            os.unlink(os.path.join(out, 'file.bin'))
            print('%-26s %7.1f Mb %7.1f Mb %8d %8.2f' % (
                label, s['goodput_mbps'] or 0, r['goodput_mbps'] or 0,
                s.get('retransmitted', 0), s['seconds'] or 0))


if __name__ == '__main__':
    main()
