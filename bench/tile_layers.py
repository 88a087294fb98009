#!/usr/bin/python3
"""A release of N layers made from one of fewer, its layers repeated in order (layer l is the
source's layer l % source_layers), for running the whole model's depth where writing N random
layers would not fit: a 48-layer int4 release from the 2-layer real-shape one that
`clef_forward --shape real --dtype int4` writes (2.2 GB) is 20 GB, where a 48-layer bf16 source
for quantize_int4 would need 64 GB more.

    tile_layers.py SRC DST LAYERS

Tensors are copied byte for byte (any dtype, quantized ones too), one shard per layer plus one
for the rest; config.json's text num_hidden_layers says LAYERS; every other file is copied.
Streams: memory stays at one tensor. Standard library only.
"""
import json
import re
import shutil
import struct
import sys
from pathlib import Path

LAYER = re.compile(r"^thinker\.model\.layers\.(\d+)\.(.*)$")


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def write_shard(path, tensors):
    """tensors: [(name, dtype, shape, source path, begin, end)]"""
    h, offset = {}, 0
    for name, dtype, shape, _, begin, end in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for *_, source, begin, end in tensors:
            with open(source, "rb") as f:
                f.seek(begin)
                left = end - begin
                while left:
                    chunk = f.read(min(left, 64 << 20))
                    out.write(chunk)
                    left -= len(chunk)
    return offset


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[-2])
    src, dst, layers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    config = json.loads((src / "config.json").read_text())
    text = config["thinker_config"]["text_config"]
    have = text["num_hidden_layers"]
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    by_layer, rest = {}, []
    for shard in sorted(set(index.values())):
        h, data = header(src / shard)
        for name, t in h.items():
            if name == "__metadata__":
                continue
            entry = (t["dtype"], t["shape"], src / shard, data + t["data_offsets"][0], data + t["data_offsets"][1])
            m = LAYER.match(name)
            if m:
                by_layer.setdefault(int(m.group(1)), []).append((m.group(2), *entry))
            else:
                rest.append((name, *entry))
    if sorted(by_layer) != list(range(have)):
        sys.exit(f"{src}: layers {sorted(by_layer)} do not match num_hidden_layers {have}")
    dst.mkdir(parents=True)
    weight_map, total = {}, 0
    files = [f"model-{i + 1:05d}-of-{layers + 1:05d}.safetensors" for i in range(layers + 1)]
    for layer in range(layers):
        tensors = [(f"thinker.model.layers.{layer}.{name}", *entry) for name, *entry in by_layer[layer % have]]
        total += write_shard(dst / files[layer], tensors)
        weight_map.update({t[0]: files[layer] for t in tensors})
        print(f"layer {layer + 1} of {layers}", end="\r", flush=True)
    total += write_shard(dst / files[layers], rest)
    weight_map.update({t[0]: files[layers] for t in rest})
    text["num_hidden_layers"] = layers
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    (dst / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    for f in src.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors.index.json") and f.suffix != ".safetensors":
            shutil.copyfile(f, dst / f.name)
        elif f.name == "joint_head.safetensors":
            shutil.copyfile(f, dst / f.name)
    print(f"\n{dst}: {layers} layers, {total / 1e9:.1f} GB of tensors")


if __name__ == "__main__":
    main()
