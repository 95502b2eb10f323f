"""Deterministic file sets for the DHT file-sharing experiment (seed 000, Parts I and II).

The seed's peers share folders of generated files: Part I uses 10K files per peer whose
sizes run from 1 KB to 5 MB and add up to about 40 MB (so about 4 KB on average: almost all
files are small, a few are large); Part II uses six sets of equal-sized files
(``PART2_SETS``: 10K x 1 KB up to 1 x 1 GB). Sizes are decimal (1 KB = 1000 bytes), as in
the seed, whose bytes/s column divides by 10^9 for its "1GB" file.

Design:

* A :class:`FileSetSpec` (label, count, sizes rule, seed) fully determines a *base set*:
  every file's name, size and content. Sizes come from ``part1_sizes`` or a fixed size;
  order is shuffled by a ``random.Random`` seeded from the spec, never by the clock.
* Content is cheap to make and still differs per file: a per-file header line
  (set id, index, size) followed by one seeded 1 MiB random block repeated, cut at the
  file's size. Each file's SHA-256 is computed while it is written.
* The base set lives in a work directory OUTSIDE the results folder
  (``<workdir>/sets/<set id>/``) with a ``fileset.json`` manifest; a later run with the same
  spec finds that manifest, checks that every file is there with its size, and reuses it.
  Part II at seed scale is ~2.7 GB, so sets are made lazily, when a point first needs one.
* Each peer shares the base set under its own names (``<peer>-<label>-<index>.bin``) through
  hard links in ``<workdir>/peers/<set id>/<peer>/``: eight peers cost no more disk than one,
  names stay unique across peers (so the index holds distinct keys, as in the seed), and the
  digest of a peer's file is the digest of the base file it links to.

``describe(fileset)`` gives the record for the run manifest (id, spec, file count, bytes,
digest of the manifest) so a results folder says exactly which files it moved.
"""

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import random

KB = 1000
MB = 1000 * KB
GB = 1000 * MB

#: Part II of the seed: label -> (file size in bytes, files per peer).
PART2_SETS = {
    'A': (1 * KB, 10000),
    'B': (10 * KB, 7000),
    'C': (100 * KB, 1000),
    'D': (10 * MB, 100),
    'E': (100 * MB, 5),
    'F': (1 * GB, 1),
}

#: Part I size mix per 10K files: (size or (low, high) range, how many per 10K).
PART1_TIERS = (
    (5 * MB, 1),
    (1 * MB, 4),
    (100 * KB, 20),
)
PART1_SMALL = (1 * KB, 5 * KB)      # every other file: uniform in this range
_BLOCK = 1 << 20
_FORMAT = 1                          # bump when the content recipe changes


@dataclasses.dataclass(frozen=True)
class FileSetSpec:
    """What a base set is: ``size`` is bytes, or 'part1' for the seed's Part I mix."""

    label: str
    count: int
    size: object
    seed: int

    def __post_init__(self):
        if not self.label or not self.label.replace('_', '').isalnum():
            raise ValueError('label must be letters, digits or _, not %r'
                             % (self.label,))
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError('count must be a positive integer, not %r'
                             % (self.count,))
        if self.size != 'part1' and (not isinstance(self.size, int)
                                     or self.size < 1):
            raise ValueError("size must be 'part1' or a positive integer, "
                             "not %r" % (self.size,))

    @property
    def set_id(self):
        """Return the directory name of this base set."""
        return '%s-n%d-%s-s%d-v%d' % (self.label, self.count, self.size,
                                      self.seed, _FORMAT)


@dataclasses.dataclass
class FileSet:
    """A base set on disk: its spec, directory and per-file (name, size, sha256)."""

    spec: FileSetSpec
    path: pathlib.Path
    files: list
    manifest_digest: str

    @property
    def total_bytes(self):
        """Return the sum of all file sizes."""
        return sum(f['size'] for f in self.files)


def part1_sizes(count, rng):
    """Return the Part I sizes for count files: a few large tiers, the rest small."""
    sizes = []
    for size, per_10k in PART1_TIERS:
        n = int(count * per_10k / 10000 + 0.5)
        if size == PART1_TIERS[0][0]:
            n = max(n, 1)   # the seed's range reaches 5 MB at every scale
        sizes.extend([size] * n)
    sizes = sizes[:count]
    low, high = PART1_SMALL
    sizes.extend(rng.randint(low, high) for _ in range(count - len(sizes)))
    rng.shuffle(sizes)
    return sizes


def part2_spec(label, seed, count_divisor=1):
    """Return the spec of Part II set `label`, with its count divided for smaller scales."""
    if label not in PART2_SETS:
        raise ValueError('unknown Part II set %r (one of %s)'
                         % (label, ', '.join(PART2_SETS)))
    size, count = PART2_SETS[label]
    return FileSetSpec('part2' + label, max(1, -(-count // count_divisor)),
                       size, seed)


def _sizes(spec):
    """Return the list of file sizes of a spec (deterministic)."""
    if spec.size == 'part1':
        return part1_sizes(spec.count, random.Random('sizes-%d' % spec.seed))
    return [spec.size] * spec.count


@functools.lru_cache(maxsize=32)
def expected_bytes(spec):
    """Return the bytes a spec's base set takes on disk, without writing it."""
    return sum(_sizes(spec))


def is_generated(spec, workdir):
    """Return True if the base set of spec is already complete under workdir."""
    return _load(spec, pathlib.Path(workdir) / 'sets' / spec.set_id) is not None


def _block(seed):
    """Return the seeded 1 MiB content block."""
    return random.Random('block-%d' % seed).randbytes(_BLOCK)


def _write_file(path, header, size, block):
    """Write header + repeated block cut at size; return the SHA-256 hex digest."""
    digest = hashlib.sha256()
    with open(path, 'wb') as f:
        head = header[:size]
        f.write(head)
        digest.update(head)
        left = size - len(head)
        while left > 0:
            piece = block[:left] if left < len(block) else block
            f.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


def _manifest_digest(files):
    """Return a SHA-256 over the (name, size, sha256) list."""
    text = json.dumps(files, sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode()).hexdigest()


def _load(spec, path):
    """Return the FileSet at path if its manifest matches spec and files are intact."""
    try:
        with open(path / 'fileset.json') as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get('spec') != dataclasses.asdict(spec):
        return None
    files = data.get('files', [])
    for entry in files:
        try:
            if (path / entry['name']).stat().st_size != entry['size']:
                return None
        except (OSError, KeyError, TypeError):
            return None
    if len(files) != spec.count or _manifest_digest(files) != data.get('digest'):
        return None
    return FileSet(spec, path, files, data['digest'])


def generate(spec, workdir):
    """Return the base set of spec under workdir, generating it unless already there."""
    path = pathlib.Path(workdir) / 'sets' / spec.set_id
    found = _load(spec, path)
    if found is not None:
        return found
    path.mkdir(parents=True, exist_ok=True)
    block = _block(spec.seed)
    files = []
    for index, size in enumerate(_sizes(spec)):
        name = 'f%06d.bin' % index
        header = ('repronet-dht %s %d %d\n' % (spec.set_id, index, size)).encode()
        files.append({'name': name, 'size': size,
                      'sha256': _write_file(path / name, header, size, block)})
    digest = _manifest_digest(files)
    tmp = path / '.fileset.json.tmp'
    with open(tmp, 'w') as f:
        json.dump({'spec': dataclasses.asdict(spec), 'files': files,
                   'digest': digest}, f, indent=1, sort_keys=True)
    os.replace(tmp, path / 'fileset.json')
    return FileSet(spec, path, files, digest)


def peer_name(peer, spec, index):
    """Return the name peer shares base file `index` under."""
    return '%s-%s-%06d.bin' % (peer, spec.label, index)


def peer_share(fileset, peer, workdir):
    """Return a directory where peer shares the set under its own names (hard links)."""
    share = pathlib.Path(workdir) / 'peers' / fileset.spec.set_id / peer
    share.mkdir(parents=True, exist_ok=True)
    for index, entry in enumerate(fileset.files):
        link = share / peer_name(peer, fileset.spec, index)
        target = fileset.path / entry['name']
        try:
            if link.stat().st_ino == target.stat().st_ino:
                continue
            link.unlink()
        except FileNotFoundError:
            pass
        os.link(target, link)
    return share


def peer_files(fileset, peer):
    """Return [(name, size, sha256)] of the files peer shares from this set."""
    return [(peer_name(peer, fileset.spec, i), e['size'], e['sha256'])
            for i, e in enumerate(fileset.files)]


def write_names(path, names):
    """Write one file name per line (the client's --names FILE)."""
    with open(path, 'w') as f:
        for name in names:
            f.write(name + '\n')
    return path


def describe(fileset):
    """Return the record of a set for the run manifest."""
    return {'id': fileset.spec.set_id, 'spec': dataclasses.asdict(fileset.spec),
            'files': len(fileset.files), 'bytes': fileset.total_bytes,
            'digest': fileset.manifest_digest, 'path': str(fileset.path)}
