"""dht8's plan without a network: points and sweep, per-point seeds, parameter checks
(one sentence each, before the lock), estimate and disk, the download heartbeat's count."""

import argparse
import math
import os
import random
import subprocess
import sys

import pytest

from analysis import dht8 as analysis
from repronet.run.options import UsageError
from topologies import dht8              # imports Mininet's Topo: a missing Mininet fails
from tests import nobody
from workloads import dht8_plan, dht8_points, dht_files, scratch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params(**kw):
    base = dict(servers=8, peers=8, replicas=1, files=10, part2_sets='ABCDE',
                part2_divisor=10, parts='I,ping,II,III,capture,failover', repeat=2,
                seed=1, window=1, timeout=5.0, bw=100.0, delay='0.05ms',
                workdir='/tmp/repronet-dht8-test')
    base.update(kw)
    return argparse.Namespace(**base)


def test_point_plan_covers_the_seed_tables():
    assert dht8.peer_counts(8) == [1, 2, 4, 8]
    assert dht8.peer_counts(3) == [1, 2, 3]
    values = dht8.combos(_params())
    part1 = [v for v in values if v['part'] == 'I']
    assert len(part1) == 4 * 3 + 4 + 4          # 3 register variants, search, download
    assert {analysis.variant(v) for v in part1} == set(analysis.SEED_PART1)
    assert [v['fileset'] for v in values if v['part'] == 'II'] == [
        'part2A', 'part2B', 'part2C', 'part2D', 'part2E', 'part2E']
    assert {v['servers'] for v in values if v['part'] == 'III'} == {1}
    ping = [v for v in values if v['part'] == 'ping']
    assert ping[0]['servers'] == 4 and ping[1]['fileset'] == 'ping'
    failover = [v for v in values if v['part'] == 'failover']
    assert [v['fault'] for v in failover] == ['kill', 'hang', 'cut']
    assert {v['replicas'] for v in failover} == {1}
    points = dht8.Dht8().points(_params())
    assert len(points) == 2 * len(values)
    assert [p['point'] for p in points] == list(range(len(points)))
    assert points[0]['seed'] != points[len(values)]['seed']    # per repetition
    no_rep = dht8.combos(_params(replicas=0, parts='I'))
    assert 'register batched replicated' not in {analysis.variant(v) for v in no_rep}


def test_node_names_agree_between_experiment_and_analysis():
    for values in dht8.combos(_params(peers=4, servers=4)):
        point = dict(values, point=7, repetition=0, seed=1)
        names = dht8_points.node_names(point)
        clients, captures = analysis.node_names(point)
        assert names['clients'] == clients and names['captures'] == captures


BAD = (
    (dict(servers=1), '--replicas 1 needs at least 2 servers'),
    (dict(servers=0), '--servers 0 must be a whole number from 1 to 64'),
    (dict(peers=100000), '--peers 100000 must be'),
    (dict(replicas=-1), '--replicas -1 needs'),
    (dict(window=0), '--window 0 must be'),
    (dict(timeout=0.0), '--timeout 0.0 must be seconds'),
    (dict(timeout=-1.0), '--timeout -1.0 must be'),
    (dict(timeout=math.nan), '--timeout nan must be'),
    (dict(timeout=math.inf), '--timeout inf must be'),
    (dict(bw=math.nan), '--bw nan must be'),
    (dict(bw=-5.0), '--bw -5.0 must be'),
    (dict(bw=5000.0), '--bw 5000.0 must be'),
    (dict(delay='5'), "--delay='5' is not a time with a unit"),
    (dict(delay='fast'), "--delay='fast' is not a time"),
    (dict(delay='5000s'), "--delay='5000s' is more than 60 s"),
    (dict(delay='2s'), '--delay 2s is over 1000 ms'),
    (dict(files=0), '--files 0 must be'),
    (dict(files=10 ** 12), '--files 1000000000000 must be'),
    (dict(part2_divisor=0), '--part2-divisor 0 must be'),
    (dict(part2_sets='AZ'), '--part2-sets takes letters among ABCDEF'),
    (dict(part2_sets=''), '--part2-sets takes letters'),
    (dict(parts='I,IV'), 'unknown --parts IV'),
    (dict(parts=''), 'unknown --parts'),
    (dict(workdir=''), '--workdir must name a folder'),
)


@pytest.mark.parametrize('kw,words', BAD)
def test_bad_parameters_get_one_clear_sentence(kw, words, tmp_path):
    params = _params(**dict(dict(workdir=str(tmp_path / 'work')), **kw))
    with pytest.raises(UsageError, match=words.replace('(', r'\(')) as info:
        dht8.Dht8().check(params)
    assert '\n' not in str(info.value)


def test_workdir_that_is_a_file_or_under_one_is_refused(tmp_path):
    afile = tmp_path / 'afile'
    afile.write_text('x')
    for workdir in (afile, afile / 'sub'):
        with pytest.raises(UsageError, match='is a file'):
            dht8.Dht8().check(_params(workdir=str(workdir)))


def test_files_that_do_not_fit_memory_or_disk_or_a_read_only_workdir(tmp_path):
    # 64 peers x 1M files x (300 x 64 + 500) bytes is far beyond any machine's memory
    with pytest.raises(UsageError, match='GB for the index'):
        dht8.Dht8().check(_params(peers=64, servers=64, replicas=63, files=10 ** 6,
                                  workdir=str(tmp_path)))
    tiny = tmp_path / 'tiny'        # a 1 MB file system cannot hold the seed's sets
    tiny.mkdir()
    mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(tiny)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip('cannot mount a small tmpfs here: %s' % mounted.stderr.decode().strip())
    try:
        with pytest.raises(UsageError, match='needs .* GB for file sets and downloads'):
            dht8.Dht8().check(_params(workdir=str(tiny / 'work')))
        subprocess.run(['mount', '-o', 'remount,ro', str(tiny)], check=True)
        with pytest.raises(UsageError, match='is not writable'):
            dht8.Dht8().check(_params(files=10, part2_sets='A', workdir=str(tiny / 'w')))
    finally:
        subprocess.run(['umount', str(tiny)], check=True)


def test_good_parameters_pass_and_build_the_topology(tmp_path):
    ok = _params(servers=2, peers=1, replicas=0, delay='0', workdir=str(tmp_path / 'w'))
    dht8.Dht8().check(ok)
    assert not (tmp_path / 'w').exists()        # check() creates nothing
    topo = dht8.Dht8().topology(ok)
    assert sorted(topo.hosts()) == ['p1', 'p2', 's1', 's2']
    assert all('delay' not in topo.linkInfo(a, b) for a, b in topo.links())
    assert 'failover' not in {v['part'] for v in dht8.combos(_params(servers=1, replicas=0))}


def test_main_refuses_bad_flags_before_the_lock_and_the_results_folder(tmp_path):
    out = tmp_path / 'run'
    # As an unprivileged user: were the check missing, the run would stop at "needs root"
    # (exit 1) instead of building a network for a trillion files.
    drop = nobody.AS_NOBODY if os.geteuid() == 0 else []
    proc = subprocess.run(drop + [sys.executable, 'topologies/dht8.py', '--files',
                                  '1000000000000', '--out', str(out), '--workdir',
                                  str(tmp_path / 'w')],
                          cwd=nobody.checkout(), capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE='1'))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        'dht8: --files 1000000000000 must be a whole number from 1 to 1000000']
    assert not out.exists() and not (tmp_path / 'w').exists()


def test_estimate_and_disk_follow_the_sizes(tmp_path):
    exp = dht8.Dht8()
    small = _params(files=100, part2_divisor=1000, workdir=str(tmp_path))
    big = _params(files=10000, part2_divisor=1, workdir=str(tmp_path))
    for params in (small, big):
        exp.check(params)
    points = {p['point']: p for p in exp.points(big)}
    part2 = [p for p in points.values() if p['part'] == 'II' and p['repetition'] == 0]
    e_small = {p['fileset']: exp.estimate(small, p) for p in exp.points(small)
               if p['part'] == 'II' and p['peers'] == 8}
    e_big = {p['fileset']: exp.estimate(big, p) for p in part2 if p['peers'] == 8}
    assert all(e_big[k] > e_small[k] > 0 for k in e_big)
    # each peer pulls set E (5 x 100 MB) over its own 100 Mbit/s link: at least 40 s
    assert e_big['part2E'] >= 40
    disk = dict((str(p), b) for p, b in exp.disk(big))
    spec = dht_files.part2_spec('E', 1, 1)
    assert disk[str(tmp_path / 'sets' / spec.set_id)] == 5 * 100 * dht_files.MB
    assert disk[str(tmp_path / 'downloads')] == 8 * 100 * 10 * dht_files.MB   # 8 x set D


def test_every_point_draws_from_its_own_seed():
    params = _params(peers=4, servers=4)
    every = dht8.Dht8().points(params)
    only = dht8.Dht8().points(_params(peers=4, servers=4, parts='failover', repeat=1))
    seeds = {(p['fault'], p['repetition']): p['seed'] for p in every
             if p['part'] == 'failover'}
    # the failover points have the same seeds whether or not other parts run before them
    assert {(p['fault'], 0): p['seed'] for p in only} == {
        k: v for k, v in seeds.items() if k[1] == 0}
    assert len(set(seeds.values())) == len(seeds)
    fs = dht_files.FileSet(dht_files.FileSetSpec('part1', 300, 'part1', 1), None,
                           [{'name': 'f%d' % i, 'size': 1, 'sha256': ''}
                            for i in range(300)], '')
    point = dict(only[0], op='search')

    def draw(seed):
        rng = random.Random(seed)
        return (dht8_points.choose_names(fs, 'p2', point, rng),
                dht8_points.choose_victim(['s1', 's2', 's3', 's4'], rng))
    assert draw(point['seed']) == draw(point['seed'])
    draws = [draw(seed) for seed in range(20)]
    assert len({tuple(names) for names, _ in draws}) == 20
    assert len({victim for _, victim in draws}) > 1
    ping = dict(point, part='ping')
    sample = dht8_points.choose_names(fs, 'p2', ping, random.Random(3))
    assert len(sample) == dht8_points.PING_SEARCHES == len(set(sample))



def test_download_heartbeat_counts_partial_files(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'done.bin').write_bytes(b'x' * 1000)
    (tmp_path / 'a' / '.done2.bin.part.1.1').write_bytes(b'x' * 500)
    assert dht8_points.folder_bytes({'p1': tmp_path / 'a', 'p2': tmp_path / 'gone'}) == 1500


def test_downloads_go_to_memory_when_they_fit_and_to_workdir_otherwise(tmp_path, monkeypatch):
    # Creating a file on this machine's ext4 holds the CPU ~1 ms (the link daemons wait);
    # --downloads-in auto puts a point's downloads on the tmpfs when they fit a quarter of
    # the memory available, memory insists, workdir never; a simulated run has a memory
    # folder of its own, named after its --workdir (simulated runs hold no machine lock).
    memory = tmp_path / 'shm' / 'repronet-dht8'
    monkeypatch.setattr(scratch, 'memory_workdir',
                        lambda name, uid=None: str(tmp_path / 'shm' / ('repronet-' + name)))
    monkeypatch.setattr(dht8_plan, '_available', lambda: 4000)
    monkeypatch.setattr(dht8_plan, '_free', lambda path: 10 ** 6)
    work = tmp_path / 'work'
    in_memory, on_disk = str(memory / 'downloads'), str(work / 'downloads')
    auto = _params(workdir=str(work), downloads_in='auto')
    assert dht8_plan.downloads_folder(auto, 1000) == in_memory
    assert dht8_plan.downloads_folder(auto, 1001) == on_disk
    assert dht8_plan.downloads_folder(_params(workdir=str(work), downloads_in='workdir'),
                                      10) == on_disk
    sim = _params(workdir=str(work), downloads_in='memory', backend='sim')
    in_sim_memory = dht8_plan.downloads_folder(sim, 10)
    assert in_sim_memory.startswith(str(tmp_path / 'shm' / 'repronet-dht8-sim-'))
    assert in_sim_memory == dht8_plan.memory_downloads(_params(
        workdir=str(work) + '/.', backend='sim'))               # the same folder, resolved
    assert in_sim_memory != dht8_plan.memory_downloads(_params(
        workdir=str(tmp_path / 'other'), backend='sim'))        # another run's its own
    assert dht8_plan.downloads_folder(_params(workdir=str(work), downloads_in='auto',
                                              backend='sim'), 1000) == in_sim_memory
    assert dht8_plan.downloads_folder(_params(workdir=str(work), downloads_in='workdir',
                                              backend='sim'), 10) == on_disk
    asked = _params(workdir=str(work), downloads_in='memory')
    assert dht8_plan.downloads_folder(asked, 1000) == in_memory
    with pytest.raises(UsageError, match=r'^--downloads-in memory: a point downloads 0\.0 GB, '
                       r'and /dev/shm can take 0\.0 GB \(25% of the memory available, at most '
                       r'its free space\); give --downloads-in auto or workdir$'):
        dht8_plan.downloads_folder(asked, 1001)
    # a tmpfs smaller than a quarter of the memory (a container's /dev/shm) bounds it too
    monkeypatch.setattr(dht8_plan, '_free', lambda path: 500)
    assert dht8_plan.downloads_folder(auto, 501) == on_disk
    assert dht8_plan.downloads_folder(auto, 500) == in_memory
    monkeypatch.setattr(scratch, 'memory_workdir', lambda name, uid=None: None)
    assert dht8_plan.downloads_folder(auto, 10) == on_disk
    with pytest.raises(UsageError, match='^--downloads-in memory needs a tmpfs at /dev/shm'):
        dht8_plan.downloads_folder(asked, 10)


def test_dry_run_lists_the_largest_download_in_each_folder(tmp_path, monkeypatch):
    memory = tmp_path / 'shm' / 'repronet-dht8'
    monkeypatch.setattr(scratch, 'memory_workdir', lambda name, uid=None: str(memory))
    big = _params(files=10000, part2_divisor=1, workdir=str(tmp_path), downloads_in='auto')
    d_set = 100 * 10 * dht_files.MB                 # set D: 100 files of 10 MB per peer
    monkeypatch.setattr(dht8_plan, '_available', lambda: 4 * d_set)   # room: one set D
    monkeypatch.setattr(dht8_plan, '_free', lambda path: 10 * d_set)
    disk = dict((str(p), b) for p, b in dht8.Dht8().disk(big))
    assert disk[str(tmp_path / 'downloads')] == 8 * d_set             # D to 8 peers
    assert disk[str(memory / 'downloads')] == 8 * 100 * dht_files.MB  # C (1,000 x 100 KB)
    # what memory takes does not count against --workdir's disk
    needs = [(p, b, s) for p, b, s in dht8_plan._needs(big, dht8.combos(big)) if s is None]
    assert sorted(dht8_plan._in_memory(p) for p, _b, _s in needs) == [False, True]


def test_memory_workdir_is_on_a_tmpfs_only(monkeypatch):
    monkeypatch.setattr(scratch, 'file_system', lambda path: 'ext4')
    assert scratch.memory_workdir('dht8') is None
    monkeypatch.setattr(scratch, 'file_system', lambda path: 'tmpfs')
    assert scratch.memory_workdir('dht8', uid=0) == '/dev/shm/repronet-dht8'
    assert scratch.memory_workdir('dht8', uid=1000) == '/dev/shm/repronet-dht8-1000'
