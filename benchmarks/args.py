"""Argument types the benchmark scripts share.

argparse's ``choices=range(...)`` answers a wrong number by listing every allowed one (a
hundred thousand for ``--count``); these answer in one sentence, as every script here must.
"""

import argparse


def whole(low, high):
    """An argparse type: a whole number from low to high, else one sentence saying so."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                '%s is not a whole number from %d to %d' % (text, low, high))
        return value
    parse.__name__ = 'whole number'
    return parse
