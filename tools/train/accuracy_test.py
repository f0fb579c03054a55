#!/usr/bin/env python3
"""Tests the answer extraction of accuracy.py (ctest label unit)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accuracy import extract  # noqa: E402

row = {'choices': {'label': ['A', 'B', 'C', 'D', 'E'],
                   'text': ['marsh', 'forest', 'desert', 'cave', 'river']}, 'answerKey': 'A'}
cases = [
    ('Answer: marsh. A zinthar is found in the marsh.', 'A'),
    ('Answer: Cave. A zinthar is found in the cave.', 'D'),
    ('Answer: C', 'C'),
    ('So the answer is E.', 'E'),
    ('I think (B) fits.', 'B'),
    ('Answer: swamp. A zinthar is found in the swamp.', None),
    ('A zinthar', None),
]
failed = [(t, want, extract(t, row)) for t, want in cases if extract(t, row) != want]
for t, want, got in failed:
    print('FAIL: %r -> %r, want %r' % (t, got, want))
print('%d passed, %d failed' % (len(cases) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
