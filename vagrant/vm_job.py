"""What one VM run does inside the VM, and how the checkout gets there and the results back.

Everything crosses one 9p share, the run's ``xfer`` folder on the host (``/mnt/xfer`` in the
VM). 9p rather than a second disk: the host builds no file system per run and reads the
results back as plain files, without loop mounts (which this machine lacks). The share holds:

- ``checkout.tar``: the checkout's files as git sees them (tracked and untracked, not ignored),
  so results, build products and caches stay behind;
- ``repo.bundle``: the history up to HEAD, so the copy in the VM is a git checkout at the
  host's revision and every manifest records the same revision and dirty flag;
- ``job.sh``: clone, unpack, ``vagrant/provision.sh`` (offline: the image has the packages),
  the command as root in the checkout, then a copy of ``results/`` to ``out/results``;
- ``out/``: written by the VM: ``rc`` (the command's exit code) and ``results/``.

A VM of a pair (vagrant/vm_pair.py) gets two more groups of lines: ``setup`` right after boot
(its address, its ssh keys) and ``ready`` between provisioning and the command (the second VM
starts sshd there; the first waits until it can ssh to the second).
"""

import os
import shlex
import subprocess
import tarfile

VM_REPO = '/root/repronet'
MARK = '== repronet-vm: '


def _git(repo, *args):
    """stdout of a git command in repo, or None where git or the repository is missing."""
    try:
        proc = subprocess.run(['git', '-c', 'safe.directory=*', '-C', repo] + list(args),
                              capture_output=True, check=False)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def checkout_files(repo):
    """(files to copy, tracked files deleted from the work tree, HEAD or None)."""
    listed = _git(repo, 'ls-files', '-z', '--cached', '--others', '--exclude-standard')
    if listed is None:              # not a git checkout: everything but the usual by-products
        skip = {'.git', 'results', 'runs', '.vagrant', '__pycache__', '.pytest_cache'}
        files = []
        for top, dirs, names in os.walk(repo):
            dirs[:] = sorted(d for d in dirs if d not in skip)
            files += [os.path.relpath(os.path.join(top, n), repo) for n in sorted(names)]
        return files, [], None
    names = sorted({n.decode() for n in listed.split(b'\0') if n})
    present = [n for n in names if os.path.lexists(os.path.join(repo, n))]
    gone = sorted(set(names) - set(present))
    head = (_git(repo, 'rev-parse', 'HEAD') or b'').decode().strip() or None
    return present, gone, head


def stage(repo, xfer, argv, env, setup=(), ready=()):
    """Write checkout.tar, repo.bundle and job.sh into xfer; return the HEAD copied."""
    files, gone, head = checkout_files(repo)
    with tarfile.open(os.path.join(xfer, 'checkout.tar'), 'w') as tar:
        for name in files:
            tar.add(os.path.join(repo, name), arcname=name, recursive=False)
    if head and _git(repo, 'bundle', 'create', '-q', os.path.join(xfer, 'repo.bundle'),
                     'HEAD') is None:
        head = None                 # no history in the VM; the files still go
    os.makedirs(os.path.join(xfer, 'out'), exist_ok=True)
    with open(os.path.join(xfer, 'job.sh'), 'w') as handle:
        handle.write(job_script(argv, env, head, gone, setup, ready))
    return head


def job_script(argv, env, head, gone, setup=(), ready=()):
    """The bash script the VM's init runs from the share (setup and ready: see above)."""
    q = shlex.quote
    lines = ['#!/bin/bash',
             '# Written by vagrant/vm_job.py for one run; the VM init runs it as root.',
             'set -u', 'X=/mnt/xfer',
             'say() { echo "%s$*"; }' % MARK,
             'say "booted: kernel $(uname -r), $(nproc) CPUs"', *setup,
             'say "copying the checkout to %s"' % VM_REPO]
    if head:
        lines += ['git clone -q --no-checkout "$X/repo.bundle" %s || exit 97' % VM_REPO,
                  'git -C %s checkout -q --detach %s || exit 97' % (VM_REPO, q(head))]
    lines += ['mkdir -p %s && tar -C %s -xf "$X/checkout.tar" || exit 97' % (VM_REPO, VM_REPO)]
    for name in gone:
        lines.append('rm -f %s' % q(os.path.join(VM_REPO, name)))
    lines += ['cd %s || exit 97' % VM_REPO]
    for key, value in sorted(env.items()):
        lines.append('export %s=%s' % (key, q(value)))
    lines += ['say "provisioning (offline: the image has every package)"',
              'bash vagrant/provision.sh > "$X/out/provision.log" 2>&1 || '
              '{ rc=$?; tail -n 30 "$X/out/provision.log"; say "provision.sh failed"; '
              'exit $rc; }', *ready,
              'say %s' % q('running: ' + ' '.join(q(a) for a in argv)),
              ' '.join(q(a) for a in argv) + '; rc=$?',
              'say "command exited $rc; copying results/ back"',
              'if [ -d results ]; then mkdir -p "$X/out/results" && '
              'cp -a results/. "$X/out/results/"; fi',
              'exit $rc', '']
    return '\n'.join(lines)
