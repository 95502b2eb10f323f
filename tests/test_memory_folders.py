"""A simulated run's memory folder goes with `repronet clean` once no run holds its --workdir."""

import fcntl
import os

from repronet.run import leftovers, memory_folders


def _folder(base, name, workdir):
    folder = base / name
    memory_folders.mark(str(folder), str(workdir))
    (folder / 'downloads').mkdir()
    (folder / 'downloads' / 'f1').write_bytes(b'x' * 100)
    return folder


def test_a_folder_whose_workdir_nobody_locks_is_removed(tmp_path):
    base, workdir = tmp_path / 'shm', tmp_path / 'work'
    base.mkdir()
    workdir.mkdir()
    (workdir / '.lock').touch()     # a run locked it once and ended (or was killed)
    folder = _folder(base, 'repronet-dht8-sim-abc', workdir)
    removed = memory_folders.remove_stale(str(base))
    assert not folder.exists()
    assert removed == ['memory folder %s (of --workdir %s)' % (folder, os.path.realpath(workdir))]


def test_a_folder_whose_workdir_a_live_run_locks_stays(tmp_path):
    base, workdir = tmp_path / 'shm', tmp_path / 'work'
    base.mkdir()
    held = leftovers.workdir_lock(str(workdir))     # what the runner holds for a run's life
    try:
        folder = _folder(base, 'repronet-dht8-sim-abc', workdir)
        assert memory_folders.remove_stale(str(base)) == []
        assert (folder / 'downloads' / 'f1').exists()
    finally:
        held.close()
    assert memory_folders.remove_stale(str(base)) != []
    assert not folder.exists()


def test_the_lock_is_free_again_after_a_removal(tmp_path):
    base, workdir = tmp_path / 'shm', tmp_path / 'work'
    base.mkdir()
    workdir.mkdir()
    (workdir / '.lock').touch()
    _folder(base, 'repronet-dht8-sim-abc', workdir)
    memory_folders.remove_stale(str(base))
    with open(workdir / '.lock') as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)      # raises if clean kept it


def test_a_folder_whose_workdir_is_gone_is_removed(tmp_path):
    base = tmp_path / 'shm'
    base.mkdir()
    folder = _folder(base, 'repronet-dht8-sim-abc', tmp_path / 'deleted-workdir')
    assert len(memory_folders.remove_stale(str(base))) == 1
    assert not folder.exists()


def test_unmarked_folders_files_and_links_are_left_alone(tmp_path):
    base = tmp_path / 'shm'
    base.mkdir()
    (base / 'repronet-dht8').mkdir()                # the emulation's shared folder: no mark
    (base / 'someone-elses-file').write_text('data')
    target = tmp_path / 'elsewhere'
    memory_folders.mark(str(target), str(tmp_path / 'gone'))
    (base / 'link').symlink_to(target)              # a link to a marked folder is not one
    relative = base / 'relative-mark'
    relative.mkdir()
    (relative / memory_folders.MARK).write_text('not/absolute\n')
    assert memory_folders.remove_stale(str(base)) == []
    assert sorted(p.name for p in base.iterdir()) == [
        'link', 'relative-mark', 'repronet-dht8', 'someone-elses-file']
    assert target.exists()


def test_a_missing_base_removes_nothing(tmp_path):
    assert memory_folders.remove_stale(str(tmp_path / 'no-such-dir')) == []


def test_a_killed_simulated_dht8_run_leaves_a_folder_clean_removes(tmp_path):
    """The real thing: dht8 --backend sim marks its folder; SIGKILLed, the run cannot remove
    it, and remove_stale (what `repronet clean` calls) does, once the run is dead."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    workdir = tmp_path / 'work'
    run = subprocess.Popen([sys.executable, str(repo / 'topologies' / 'dht8.py'), '--backend',
                            'sim', '--scale', 'smoke', '--workdir', str(workdir), '--out',
                            str(tmp_path / 'out')], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    mine = str(workdir.resolve()) + '\n'
    folder, deadline = None, time.monotonic() + 120
    try:
        while folder is None and run.poll() is None and time.monotonic() < deadline:
            for mark in Path(memory_folders.BASE).glob('repronet-dht8-sim-*/' + memory_folders.MARK):
                if mark.read_text() == mine:
                    folder = mark.parent
            time.sleep(0.05)
        assert folder is not None, 'the run never marked a memory folder'
        kept = memory_folders.remove_stale()      # the run is alive and holds its lock
        assert not any(str(folder) in item for item in kept) and folder.exists()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    assert folder.exists()                          # nobody removed it after the kill
    assert any(str(folder) in item for item in memory_folders.remove_stale())
    assert not folder.exists()


def test_an_emulated_runs_folder_goes_only_under_the_machine_lock(tmp_path):
    """An emulated run's folder (marked MACHINE) is removed by a caller holding the machine
    lock, as clean() does, and left by one that does not say so."""
    base = tmp_path / 'shm'
    base.mkdir()
    folder = base / 'repronet-dht8'
    memory_folders.mark_machine(str(folder))
    (folder / 'downloads').mkdir()
    (folder / 'downloads' / 'f1').write_bytes(b'x' * 100)
    assert memory_folders.remove_stale(str(base)) == []
    assert folder.exists()
    assert memory_folders.remove_stale(str(base), machine_locked=True) == [
        'memory folder %s (of an emulated run)' % folder]
    assert not folder.exists()


def test_clean_removes_an_emulated_runs_folder_unless_its_runner_lives(tmp_path, monkeypatch):
    """leftovers.clean() (under the machine lock) takes a killed emulated run's folder with
    it, and keeps it while the run that wrote the state is alive."""
    base = tmp_path / 'shm'
    base.mkdir()
    folder = base / 'repronet-dht8'
    memory_folders.mark_machine(str(folder))
    monkeypatch.setattr(memory_folders, 'BASE', str(base))
    monkeypatch.setattr(leftovers, '_links', lambda: [])       # nothing else of the machine's
    monkeypatch.setattr(leftovers.namespaces, 'probe_namespaces', lambda age: [])
    monkeypatch.setattr(leftovers.namespaces, 'bench_namespaces', lambda: [])
    monkeypatch.setattr(leftovers, '_stale_cgroups', lambda: [])
    monkeypatch.setattr(leftovers.State, 'load', staticmethod(lambda path: _Alive()))
    assert not any(str(folder) in item for item in leftovers.clean(say=False))
    assert folder.exists()
    monkeypatch.setattr(leftovers.State, 'load', staticmethod(lambda path: None))
    assert 'memory folder %s (of an emulated run)' % folder in leftovers.clean(say=False)
    assert not folder.exists()


class _Alive:
    """A recorded run state whose runner is alive."""

    def runner_alive(self):
        return 4242
