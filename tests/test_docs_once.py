"""A paragraph the README states is not repeated word for word in the docs page that gives
the same topic in full: the page links to the README's section instead, so the two cannot
drift apart (docs/cpu-saturation.md repeated the README's "CPU saturation" paragraph; the
link-emulation, VM, simulation and experiments pages repeated the README's opening paragraph,
commands, descriptions and targets tables of their topic)."""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# docs page -> the README section it gives in full: (heading, the anchor it must link to)
PAGES = {'docs/cpu-saturation.md': ('CPU saturation', 'cpu-saturation'),
         'docs/link-emulation.md': ('Link emulation', 'link-emulation'),
         'docs/vm.md': ('In a VM with a netem kernel: vagrant/vm.py (and Vagrant)',
                        'in-a-vm-with-a-netem-kernel-vagrantvmpy-and-vagrant'),
         'docs/simulation.md': ('Simulation backend', 'simulation-backend'),
         'docs/experiments.md': ('Experiments', 'experiments')}


def _paragraphs(text):
    """Paragraphs of a Markdown text, whitespace folded, the short ones (headings) left out."""
    return {' '.join(p.split()) for p in re.split(r'\n\s*\n', text) if len(p.split()) >= 20}


@pytest.mark.parametrize('page', sorted(PAGES))
def test_the_page_links_to_the_readme_instead_of_repeating_it(page):
    readme = (REPO / 'README.md').read_text(encoding='utf-8')
    text = (REPO / page).read_text(encoding='utf-8')
    heading, anchor = PAGES[page]
    assert re.search(r'\n##+ %s\n' % re.escape(heading), readme)
    assert not _paragraphs(readme) & _paragraphs(text)
    assert '(../README.md#%s)' % anchor in text
