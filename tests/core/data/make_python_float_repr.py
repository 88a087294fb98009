#!/usr/bin/env python3
"""Writes python_float_repr.txt: doubles with CPython's repr(x) and repr(round(x, 4)).

Run once by hand (not at test time); the committed output is what json_test.cpp reads.
"""
import math
import random
import struct
import sys

random.seed(20261203)
vals = [0.0, -0.0, 1.0, -1.0, 0.1, 0.5, 1e-5, 1e16, 1e15, 9999999999999998.0, 1e-4, 9.9e-5,
        5e-324, 2.2250738585072014e-308, 1.7976931348623157e+308, 1e22, 1e-7, 123456789.125,
        1250.0, 0.30000000000000004, 1 / 3, 2 / 3, 100.0, 1e21, 1e-320, 4.35, 0.9551,
        0.07869408434682529, 1e100, 1.5e300, -2.5e-10]
for _ in range(300):
    x = struct.unpack('<d', struct.pack('<Q', random.getrandbits(64)))[0]
    if math.isfinite(x):
        vals.append(x)
for _ in range(300):
    vals.append(random.uniform(0, 1) * 10 ** random.randint(-8, 20))
for _ in range(100):
    vals.append(float(random.randint(0, 10 ** 17)))

with open('python_float_repr.txt', 'w') as f:
    f.write('# bits(hex) repr(x) repr(round(x,4)) -- written by CPython %s\n' % sys.version.split()[0])
    for x in vals:
        bits = struct.unpack('<Q', struct.pack('<d', x))[0]
        f.write('%016x %r %r\n' % (bits, x, round(x, 4)))
