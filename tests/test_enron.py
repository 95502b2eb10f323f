"""workloads.enron on a small maildir made here: several users, nested folders, odd messages.

The real corpus cannot be downloaded on this machine; the layout and header forms below
follow it (``maildir/<user>/<folder>[/<sub>]/<n>.``, ``Message-ID: <...JavaMail.evans@thyme>``).
"""

import os

import pytest

from workloads import enron


def _message(mid, body, extra=b''):
    """An Enron-style message file's bytes."""
    header = b'Date: Mon, 14 May 2001 16:39:00 -0700 (PDT)\r\n'
    if mid is not None:
        header = b'Message-ID: ' + mid + b'\r\n' + header
    return header + extra + b'From: a@enron.com\r\nSubject: x\r\n\r\n' + body


def _write(root, rel, data):
    path = root.joinpath(*rel.split('/'))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def maildir(tmp_path):
    """A maildir of three users; 7 usable messages and one of each skip reason."""
    root = tmp_path / 'enron_mail' / 'maildir'
    _write(root, 'allen-p/inbox/1.', _message(b'<1.JavaMail.evans@thyme>', b'first'))
    _write(root, 'allen-p/inbox/2.', _message(b'<2.JavaMail.evans@thyme>', b'second'))
    _write(root, 'allen-p/inbox/10.', _message(b'<10.JavaMail.evans@thyme>', b'tenth'))
    _write(root, 'allen-p/inbox/notes.txt', b'not a message')
    _write(root, 'allen-p/sent/1.', _message(b'<1.JavaMail.evans@thyme>', b'first again'))
    _write(root, 'allen-p/deleted_items/2001/q1/5.',
           _message(b'<5.JavaMail.evans@thyme>', b'nested\n\nbody with a blank line'))
    _write(root, 'bass-e/inbox/1.', _message(None, b'no id'))
    _write(root, 'bass-e/inbox/2.', _message(b'<bin@thyme>', bytes(range(256))))
    _write(root, 'bass-e/inbox/3.', b'message-id:\r\n <folded@thyme>\r\nSubject: y\r\n\r\nlower')
    _write(root, 'bass-e/inbox/4.', _message(b'<' + b'k' * 600 + b'>', b'long id'))
    _write(root, 'zipper-a/all_documents/1.', b'Message-ID: <lf@thyme>\nSubject: z\n\nunix')
    return root


def test_loads_in_a_fixed_order_and_counts_what_it_skips(maildir):
    pairs, loader = enron.load(str(maildir))
    assert pairs == [
        (b'<5.JavaMail.evans@thyme>', b'nested\n\nbody with a blank line'),
        (b'<1.JavaMail.evans@thyme>', b'first'),
        (b'<2.JavaMail.evans@thyme>', b'second'),
        (b'<10.JavaMail.evans@thyme>', b'tenth'),       # 10. after 2.: by number
        (b'<bin@thyme>', bytes(range(256))),
        (b'<folded@thyme>', b'lower'),
        (b'<lf@thyme>', b'unix'),
    ]
    assert dict(loader.skipped) == {'duplicate': 1, 'no_message_id': 1, 'key_too_long': 1,
                                    'not_a_message': 1}
    assert loader.loaded == 7 and loader.root == str(maildir)


def test_parent_folder_path_keys_and_limit(maildir):
    """The folder holding maildir/ works too; path keys never collide; limit stops early."""
    pairs, loader = enron.load(str(maildir.parent), keys='path', limit=3)
    assert [k for k, _ in pairs] == [b'allen-p/deleted_items/2001/q1/5.', b'allen-p/inbox/1.',
                                     b'allen-p/inbox/2.']
    pairs, loader = enron.load(str(maildir), keys='path')
    assert len(pairs) == 10 and loader.skipped == {'not_a_message': 1}
    assert (b'bass-e/inbox/1.', b'no id') in pairs
    again, _ = enron.load(str(maildir), keys='path')
    assert again == pairs


def test_value_limit_and_unreadable_files(maildir):
    """Bodies over max_value_bytes and files that cannot be read are skipped, not raised."""
    pairs, loader = enron.load(str(maildir), max_value_bytes=5)
    # second, nested, the binary body and 'first again' (a duplicate, but too long first)
    assert loader.skipped['value_too_long'] == 4 and all(len(v) <= 5 for _, v in pairs)
    bad = maildir / 'bass-e' / 'inbox' / '9.'
    bad.mkdir()                     # a folder named like a message file
    (bad / '1.').write_bytes(_message(b'<inside@thyme>', b'ok'))
    # unreadable even for root: a dangling link
    os.symlink(maildir / 'nowhere', maildir / 'bass-e' / 'inbox' / '7.')
    pairs, loader = enron.load(str(maildir))
    assert (b'<inside@thyme>', b'ok') in pairs
    assert loader.skipped['unreadable'] == 1 and loader.loaded == 8


@pytest.mark.parametrize('make', ['missing', 'empty', 'file', 'nothing_usable'])
def test_unusable_folders_are_one_sentence(tmp_path, make):
    path = tmp_path / 'maildir'
    if make == 'empty':
        path.mkdir()
    elif make == 'file':
        path.write_bytes(b'')
    elif make == 'nothing_usable':
        _write(path, 'a/inbox/1.', b'Subject: no id\r\n\r\nbody')
    with pytest.raises(enron.EnronError) as info:
        enron.load(str(path))
    text = str(info.value)
    assert str(path) in text and '\n' not in text
    if make == 'nothing_usable':
        assert 'skipped: 1 no message id' in text


def test_message_parts():
    assert enron.split_message(b'A: 1\r\n\r\nbody\r\n\r\nmore') == (b'A: 1', b'body\r\n\r\nmore')
    assert enron.split_message(b'no header at all') == (b'', b'no header at all')
    assert enron.message_id(b'Subject: x\r\nMESSAGE-ID:   <a@b> ') == b'<a@b>'
    assert enron.message_id(b'Subject: x\r\nX-Message-ID: <a@b>') is None
    assert enron.message_id(b'Message-ID:\r\n') is None
