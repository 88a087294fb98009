"""Digest of transformers' smart_resize (v4.57, Qwen2VL; factor 32) over the grids that
vision_preprocess_test.cpp walks: prints one FNV-1a 64 digest per pixel-bound pair.

Each result adds (h', w') as two little-endian int64, or (-1, -1) where the reference raises
(aspect ratio above 200). Python's own round() and math keep the half-to-even and float details.
"""
import math

FACTOR = 32
BOUNDS = [(3136, 12845056), (65536, 1048576), (128 * 32 * 32, 768 * 32 * 32)]
SIDES = list(range(1, 601)) + list(range(601, 20001, 97))


def smart_resize(height, width, factor, min_pixels, max_pixels):
    if max(height, width) / min(height, width) > 200:
        return None
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def digest(min_pixels, max_pixels):
    h = 0xCBF29CE484222325
    for height in SIDES:
        for width in SIDES:
            r = smart_resize(height, width, FACTOR, min_pixels, max_pixels) or (-1, -1)
            for v in r:
                for b in (v & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"):
                    h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


if __name__ == "__main__":
    for lo, hi in BOUNDS:
        print(f"{{{lo}, {hi}, 0x{digest(lo, hi):016x}ull}},")
