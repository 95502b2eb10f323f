"""Protocol cores stay sans-I/O: no core module (nor what it imports from its package) may
import asyncio, socket, time, random or select -- so a simulator can drive them with a
virtual clock. Found by parsing with `ast`, so imports inside functions count too."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {'asyncio', 'socket', 'time', 'random', 'select'}


def imports(path):
    """(top-level module, local module of the same package or None) for every import."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name.split('.')[0], None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:          # from . import codec / from .ring import Ring
                mods = [node.module] if node.module else [a.name for a in node.names]
                out += [(None, m.split('.')[0]) for m in mods]
            else:
                out.append((node.module.split('.')[0], None))
    return out


def core_closure(core):
    """The core module plus every module of its package it imports, transitively."""
    seen, todo = [], [core]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        for _, local in imports(path):
            if local and (path.parent / (local + '.py')).exists():
                todo.append(path.parent / (local + '.py'))
    return seen


def violations(core):
    return ['%s imports %s' % (p.relative_to(ROOT) if p.is_relative_to(ROOT) else p, mod)
            for p in core_closure(core) for mod, _ in imports(p) if mod in FORBIDDEN]


CORES = sorted(ROOT.glob('nodes/*/*core*.py'))


def test_cores_are_found():
    names = {p.name for p in CORES}
    assert {'client_core.py', 'client_ops_core.py', 'server_core.py'} <= names


@pytest.mark.parametrize('core', CORES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_does_no_io(core):
    assert violations(core) == []


@pytest.mark.parametrize('stmt', ['import time', 'from socket import socket',
                                  'def f():\n    import random.x\n', 'import os, select'])
def test_a_planted_import_is_caught_through_the_package(tmp_path, stmt):
    pkg = tmp_path / 'nodes' / 'x'
    pkg.mkdir(parents=True)
    (pkg / 'helper.py').write_text('import hashlib\n' + stmt + '\n')
    (pkg / 'x_core.py').write_text('from . import helper\nfrom .helper import y\n')
    found = violations(pkg / 'x_core.py')
    assert found and all('helper.py' in v for v in found)
    (pkg / 'helper.py').write_text('import hashlib\n')
    assert violations(pkg / 'x_core.py') == []
