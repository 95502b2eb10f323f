"""File sets: deterministic names, sizes and content; reuse; per-peer hard links."""

import hashlib
import os

import pytest

from workloads import dht_files
from workloads.dht_files import KB, MB, FileSetSpec


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_part1_mix_matches_the_seed_at_seed_size(tmp_path):
    import random
    sizes = dht_files.part1_sizes(10000, random.Random(1))
    assert len(sizes) == 10000
    assert min(sizes) == 1 * KB and max(sizes) == 5 * MB
    assert 35 * MB <= sum(sizes) <= 45 * MB          # "about 40 MB" per 10K files
    assert sorted(sizes)[5000] < 5 * KB               # almost all files are small


def test_small_sets_still_reach_5mb():
    import random
    sizes = dht_files.part1_sizes(50, random.Random(3))
    assert len(sizes) == 50 and max(sizes) == 5 * MB


def test_generation_is_deterministic_and_digests_differ(tmp_path):
    spec = FileSetSpec('part1', 60, 'part1', 7)
    a = dht_files.generate(spec, tmp_path / 'a')
    b = dht_files.generate(spec, tmp_path / 'b')
    assert a.files == b.files and a.manifest_digest == b.manifest_digest
    assert len({f['sha256'] for f in a.files}) == 60
    for entry in a.files[:10]:
        path = a.path / entry['name']
        assert path.stat().st_size == entry['size']
        assert _digest(path) == entry['sha256']
    other = dht_files.generate(FileSetSpec('part1', 60, 'part1', 8), tmp_path / 'a')
    assert other.manifest_digest != a.manifest_digest


def test_reuse_and_repair(tmp_path):
    spec = FileSetSpec('part2C', 5, 100 * KB, 1)
    first = dht_files.generate(spec, tmp_path)
    target = first.path / first.files[0]['name']
    stamp = target.stat().st_mtime_ns
    again = dht_files.generate(spec, tmp_path)
    assert again.manifest_digest == first.manifest_digest
    assert target.stat().st_mtime_ns == stamp          # reused, not rewritten
    target.write_bytes(b'short')                       # damaged: regenerate
    fixed = dht_files.generate(spec, tmp_path)
    assert target.stat().st_size == 100 * KB
    assert _digest(target) == fixed.files[0]['sha256'] == first.files[0]['sha256']


def test_part2_specs_scale_counts_not_sizes():
    spec = dht_files.part2_spec('B', 1)
    assert (spec.count, spec.size) == (7000, 10 * KB)
    assert dht_files.part2_spec('B', 1, count_divisor=100).count == 70
    assert dht_files.part2_spec('F', 1, count_divisor=100).count == 1
    with pytest.raises(ValueError):
        dht_files.part2_spec('Z', 1)


def test_peer_share_links_unique_names(tmp_path):
    fs = dht_files.generate(FileSetSpec('part1', 12, 'part1', 2), tmp_path)
    p1 = dht_files.peer_share(fs, 'p1', tmp_path)
    p2 = dht_files.peer_share(fs, 'p2', tmp_path)
    names1 = sorted(os.listdir(p1))
    names2 = sorted(os.listdir(p2))
    assert len(names1) == 12 and not set(names1) & set(names2)
    listed = dht_files.peer_files(fs, 'p1')
    assert sorted(n for n, _, _ in listed) == names1
    name, size, sha = listed[3]
    assert (p1 / name).stat().st_size == size and _digest(p1 / name) == sha
    assert (p1 / name).stat().st_ino == (fs.path / fs.files[3]['name']).stat().st_ino
    assert dht_files.peer_share(fs, 'p1', tmp_path) == p1   # idempotent
    record = dht_files.describe(fs)
    assert record['files'] == 12 and record['bytes'] == fs.total_bytes


def test_bad_specs_are_rejected():
    for bad in (dict(label='a/b', count=1, size=1, seed=1),
                dict(label='a', count=0, size=1, seed=1),
                dict(label='a', count=1, size='big', seed=1)):
        with pytest.raises(ValueError):
            FileSetSpec(**bad)


def test_expected_bytes_and_is_generated_without_writing(tmp_path):
    spec = FileSetSpec('part1', 40, 'part1', 5)
    assert not dht_files.is_generated(spec, tmp_path)
    assert not (tmp_path / 'sets').exists()             # asking writes nothing
    expected = dht_files.expected_bytes(spec)
    made = dht_files.generate(spec, tmp_path)
    assert made.total_bytes == expected
    assert dht_files.is_generated(spec, tmp_path)
    (made.path / made.files[0]['name']).write_bytes(b'short')
    assert not dht_files.is_generated(spec, tmp_path)
