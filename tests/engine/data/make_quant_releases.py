#!/usr/bin/python3
"""Writes small quantized Clef-Omni releases, in the layouts the community's int4 and fp8 releases
use, and what the reference computes on each: OUTDIR/<name>/release and OUTDIR/<name>/expected.jsonl.

The weights are random (fixed seed), generated in float32 ("the source"), then quantized by
round-to-nearest and packed as the tools pack them. expected.jsonl is bench/reference_eager.py's
forward (imported, not copied) run on the DEQUANTIZED float32 weights read back from the written
files, for the text records of tests/data/vectors/clef-omni-tiny. Every run also checks each release
against the source (the dequantization error within what the format allows) and fails otherwise.

Formats and their sources (tool, file, version): docs/quant-formats.md. In short:
  autoround_sym_g32        quant_method auto-round, packing_format auto_round:auto_gptq (AutoRound's
                           default for W4A16 sym): qweight/qzeros/scales, no g_idx, zeros stored - 1,
                           signed fp16 scales
  gptq_asym_g64_actorder   GPTQModel checkpoint_format gptq (v1: zeros stored - 1), sym false,
                           desc_act true: g_idx a permutation's groups; other tensors fp16
  gptq_v2_asym_g32         GPTQModel checkpoint_format gptq_v2 (zeros stored as they are), trivial
                           g_idx; some groups have zero points 0 and 15
  fp8_block                quant_method fp8, e4m3, weight_block_size [128, 128]: weight (F8_E4M3)
                           + weight_scale_inv (F32, ceil-sized); dims 64 and 192 give partial blocks
  autoround_mixed_g64      auto-round auto_round:auto_gptq g64: experts of layers 0 and 2 int4, layer
                           1's experts, attention and routers bf16 (extra_config), joint head bf16

The source model has the tiny release's config with hidden 128, 6 heads x 32 (q 192), 2 kv heads
(k/v 64), moe_intermediate 192 (so groups of 32 and 64 divide every input dim and fp8 blocks are
partial), its tokenizer and records; the joint head, towers and text weights are new random ones.

Usage: make_quant_releases.py OUTDIR            write every release (the ctest fixture)
       make_quant_releases.py --expected DIR FILE  the reference's logits on the release DIR,
                                                read as above, into FILE
       make_quant_releases.py --check DIR       dequantize DIR (a release) and print, per tensor
                                                kind, max |w - w_float| against the source
Needs only Debian's python3-torch and numpy; writes only under OUTDIR.
"""
import copy
import json
import re
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_releases  # noqa: E402  (shapes of the joint head and the media encoders)
import reference_eager  # noqa: E402  (the reference forward: thinker_text, joint_schema_head)

TINY = ROOT / "tests" / "data" / "vectors" / "clef-omni-tiny"
SEED = 20260823
SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
          "model-00003-of-00003.safetensors"]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "preprocessor_config.json"]
PROJS = ["q_proj", "k_proj", "v_proj", "o_proj"]
EXPERT_PROJS = ["gate_proj", "up_proj", "down_proj"]
V1_OFFSET = 0x11111111  # GPTQModel's v1 <-> v2 conversion: one added to each nibble of a qzeros word
# A module whose quantized tensors are split over two shards, as a real sharded release can have.
SPLIT_MODULE = "thinker.model.layers.0.mlp.experts.7.down_proj"


# ---- the source model ---------------------------------------------------------------------------

def source_config():
    config = json.loads((TINY / "release" / "config.json").read_text())
    thinker = config["thinker_config"]
    text = thinker["text_config"]
    text.update({"hidden_size": 128, "intermediate_size": 384, "num_attention_heads": 6,
                 "num_key_value_heads": 2, "head_dim": 32, "moe_intermediate_size": 192})
    thinker["vision_config"]["out_hidden_size"] = 128
    thinker["audio_config"]["output_dim"] = 128
    config["talker_config"]["thinker_hidden_size"] = 128
    config["note"] = "TINY RANDOM TEST MODEL written by make_quant_releases.py (not Clef-Omni weights)"
    head_config = dict(json.loads((TINY / "release" / "joint_head_config.json").read_text()), hidden_size=128)
    return config, head_config


def linear_names(text):
    """The thinker's nn.Linear modules inside its decoder layers, in order."""
    out = []
    for l in range(text["num_hidden_layers"]):
        p = f"thinker.model.layers.{l}."
        out += [p + "self_attn." + n for n in PROJS] + [p + "mlp.gate"]
        out += [f"{p}mlp.experts.{e}.{n}" for e in range(text["num_experts"]) for n in EXPERT_PROJS]
    return out


def kind(name):
    """A tensor's kind, for --check's table."""
    if name.startswith(("thinker.visual.", "thinker.audio_tower.")):
        return "vision tower" if ".visual." in name else "audio tower"
    for k in PROJS + EXPERT_PROJS:
        if name.endswith("." + k + ".weight"):
            return ("expert " if ".experts." in name else "attn ") + k
    if name.endswith("mlp.gate.weight"):
        return "router"
    if name.startswith("head."):
        return "joint head"
    if "norm" in name:
        return "norms"
    return name.split(".")[-2]  # embed_tokens, lm_head


def source_model():
    """float32 tensors: the text model, the media encoders, the head (keys 'head.*'), and the tiny
    release's talker/code2wav tensors (which the loader skips)."""
    config, head_config = source_config()
    text, thinker = config["thinker_config"]["text_config"], config["thinker_config"]
    g = torch.Generator().manual_seed(SEED)
    randn = lambda *shape: torch.randn(*shape, generator=g)
    out = {}
    for name, shape in make_releases.text_tensors(text).items():
        if len(shape) == 1:  # RMSNorm weights around one
            out[name] = 1.0 + 0.1 * randn(shape)
        elif name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
            out[name] = 0.5 * randn(shape)
        else:
            out[name] = 0.05 * randn(shape)
    # Groups whose zero point is 0 (all positive) and 15 (all negative) under groups of 32.
    w = out["thinker.model.layers.1.mlp.experts.3.gate_proj.weight"]
    w[0:8, 0:32] = w[0:8, 0:32].abs()
    w[8:16, 32:64] = -w[8:16, 32:64].abs()
    for name, shape in make_releases.media_tensors(thinker["vision_config"], thinker["audio_config"]).items():
        out[name] = 0.1 * randn(shape)
    for name, shape in make_releases.head_tensors(head_config).items():
        norm = re.search(r"(norm\d?|_norm)\.weight$", name)
        out["head." + name] = (1.0 + 0.1 * randn(shape)) if norm else 0.1 * randn(shape)
    for name in ("prior_logit_scale", "joint_logit_scale", "residual_gate"):
        out["head." + name] = 0.5 * randn(())
    tiny = {}
    for shard in sorted(set(json.loads((TINY / "release" / "model.safetensors.index.json").read_text())
                            ["weight_map"].values())):
        reference_eager.read_safetensors(TINY / "release" / shard, lambda n: n.startswith(("talker.", "code2wav.")),
                                         tiny)
    out.update(tiny)
    return config, head_config, out


# ---- safetensors with the dtypes torch 1.13 lacks (F8_E4M3) --------------------------------------

TORCH_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32",
               torch.uint8: "U8"}
ELEMENT = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "U8": 1, "F8_E4M3": 1}


def write_safetensors(path, tensors):
    """tensors: {name: torch tensor or (dtype name, uint8 tensor of the bytes, shape)}; laid out as
    make_releases.write_safetensors lays them out (format pt, 8-byte aligned data)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        if isinstance(t, tuple):
            dtype, raw, shape = t
            data = raw.contiguous().numpy().tobytes()
        else:
            dtype, shape = TORCH_NAMES[t.dtype], list(t.shape)
            data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return offset


def read_safetensors(path):
    """{name: (dtype name, numpy array)}: F8_E4M3 as uint8 codes, BF16 as float32."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, e in json.loads(data[8:8 + size]).items():
        if name == "__metadata__":
            continue
        begin, end = (8 + size + o for o in e["data_offsets"])
        raw = np.frombuffer(data[begin:end], dtype=np.uint8)
        dtype = e["dtype"]
        if dtype == "BF16":
            a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = raw.view({"F32": np.float32, "F16": np.float16, "I32": np.int32, "U8": np.uint8,
                          "F8_E4M3": np.uint8}[dtype])
        out[name] = (dtype, a.reshape(e["shape"]))
    return out


# ---- int4, GPTQ layout ---------------------------------------------------------------------------

def quantize_autoround_sym(w, group):
    """AutoRound's int_sym (auto_round/data_type/int.py quant_tensor_sym), v=0: signed fp16 scale
    max_v/8, q = clamp(round(w/scale), -8, 7); code q + 8 (zero point 8). Returns codes [N,K],
    scales fp16 [N,G], zeros [N,G], g_idx None."""
    n, k = w.shape
    x = w.reshape(n, k // group, group)
    wmin = x.min(-1).values.clamp(max=0)
    wmax = x.max(-1).values.clamp(min=0)
    max_v = torch.where(wmax < -wmin, -wmin, -wmax)
    scale = (max_v / 8).to(torch.float16).float()
    scale = torch.where(scale < 0, scale.clamp(max=-1e-5), scale.clamp(min=1e-5)).to(torch.float16)
    q = torch.clamp(torch.round(x / scale.float()[..., None]), -8, 7)
    codes = (q + 8).to(torch.int32).reshape(n, k)
    return codes, scale, torch.full_like(scale, 8, dtype=torch.int32), None


def quantize_gptq_asym(w, group, perm=None):
    """GPTQ's asymmetric RTN (quantization/quantizer.py find_params, no error feedback): per group
    scale (xmax-xmin)/15, zero round(-xmin/scale), code clamp(round(w/scale)+zero, 0, 15). With
    perm (act-order), group j holds the input columns perm[j*G:(j+1)*G] and g_idx[k] = (position
    of k in perm) // G, as gptq.py leaves it after Q[:, invperm]."""
    n, k = w.shape
    perm = torch.arange(k) if perm is None else perm
    g_idx = (torch.argsort(perm) // group).to(torch.int32)
    x = w[:, perm].reshape(n, k // group, group)
    xmin = x.min(-1).values.clamp(max=0)
    xmax = x.max(-1).values.clamp(min=0)
    both0 = (xmin == 0) & (xmax == 0)
    xmin, xmax = torch.where(both0, -torch.ones_like(xmin), xmin), torch.where(both0, torch.ones_like(xmax), xmax)
    scale = (xmax - xmin) / 15
    zero = torch.round(-xmin / scale)
    s16 = scale.to(torch.float16)
    gi = g_idx.long()
    codes = torch.clamp(torch.round(w / s16.float()[:, gi]) + zero[:, gi], 0, 15).to(torch.int32)
    return codes, s16, zero.to(torch.int32), g_idx


def pack_int4(codes, scales, zeros, g_idx, v1):
    """The GPTQ tensors (AutoGPTQ/GPTQModel pack, AutoRound qlinear_torch_zp / qlinear_torch):
    qweight [K/8, N]: 8 codes along the input per int32, code of input 8r+j at bits 4j;
    qzeros [G, N/8]: 8 zeros along the output per int32; v1 stores each zero minus one, done on the
    packed word as GPTQModel does (word - 0x11111111, wrapping); scales [G, N] fp16; g_idx [K]."""
    n, k = codes.shape
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    qweight = (codes.t().reshape(k // 8, 8, n).to(torch.int64) << shifts[None, :, None]).sum(1)
    qzeros = (zeros.t().reshape(zeros.shape[1], n // 8, 8).to(torch.int64) << shifts).sum(-1)
    if v1:
        qzeros = (qzeros - V1_OFFSET) % 2**32
    wrap = lambda t: (((t + 2**31) % 2**32) - 2**31).to(torch.int32)  # uint32 bits as int32
    out = {"qweight": wrap(qweight), "qzeros": wrap(qzeros), "scales": scales.t().contiguous()}
    if g_idx is not None:
        out["g_idx"] = g_idx
    return out


def dequantize_int4(t, v1, group):
    """The inverse, as a loader does it: W[n][k] = scales[g][n] * (code[k][n] - zero[g][n]),
    g = g_idx[k] (k // group without g_idx), v1 zeros read back as word + 0x11111111."""
    qweight, qzeros = t["qweight"].astype(np.int64) & 0xFFFFFFFF, t["qzeros"].astype(np.int64) & 0xFFFFFFFF
    scales = t["scales"].astype(np.float32)
    if v1:
        qzeros = (qzeros + V1_OFFSET) & 0xFFFFFFFF
    shifts = np.arange(0, 32, 4)
    codes = ((qweight[:, None, :] >> shifts[None, :, None]) & 15).reshape(-1, qweight.shape[1])  # [K, N]
    zeros = ((qzeros[:, :, None] >> shifts) & 15).reshape(qzeros.shape[0], -1)  # [G, N]
    k = codes.shape[0]
    g = t["g_idx"].astype(np.int64) if "g_idx" in t else np.arange(k) // group
    w = scales[g] * (codes - zeros[g]).astype(np.float32)
    return w.T.copy()


# ---- fp8 e4m3, 128 x 128 blocks -------------------------------------------------------------------

def e4m3_values():
    """float value of each code 0..255 (torch.float8_e4m3fn: bias 7, no inf, 0x7F/0xFF NaN)."""
    codes = np.arange(256)
    e, m = (codes >> 3) & 15, codes & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where(codes & 0x80, -v, v)
    v[[0x7F, 0xFF]] = np.nan
    return v


E4M3 = e4m3_values()


def to_e4m3(x):
    """Round-to-nearest-even to e4m3 codes, saturating at 448 (as clamp then cast)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    pos = E4M3[:127]  # codes 0..126, increasing
    hi = np.clip(np.searchsorted(pos, a), 1, 126)
    lo = hi - 1
    d_lo, d_hi = a - pos[lo], pos[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def quantize_fp8_block(w, block=128):
    """DeepSeek-V3's / transformers' block fp8: per 128x128 block (partial at the edges: the scale
    from the block's own elements, as if zero-padded) scale_inv = amax/448; fp8 = e4m3(w /
    scale_inv); W = fp8 * scale_inv."""
    n, k = w.shape
    bn, bk = -(-n // block), -(-k // block)
    scale_inv = torch.zeros(bn, bk, dtype=torch.float32)
    codes = np.zeros((n, k), dtype=np.uint8)
    for i in range(bn):
        for j in range(bk):
            b = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = (b.abs().max() / 448.0).to(torch.float32)
            scale_inv[i, j] = s
            codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = to_e4m3((b / s).numpy())
    return codes, scale_inv


def dequantize_fp8(codes, scale_inv, block=128):
    n, k = codes.shape
    s = np.repeat(np.repeat(scale_inv.astype(np.float32), block, 0), block, 1)[:n, :k]
    return E4M3[codes].astype(np.float32) * s


# ---- the formats ----------------------------------------------------------------------------------

def autoround_config(group, extra_config):
    return {"bits": 4, "group_size": group, "sym": True, "data_type": "int", "iters": 0,
            "autoround_version": "0.15.0", "block_name_to_quantize": "thinker.model.layers",
            "quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
            "extra_config": extra_config}


def float_entry():  # what AutoRound writes for a layer kept in float inside a quantized block
    return {"bits": 16, "data_type": "float"}


def gptqmodel_config(group, desc_act, v2):
    return {"bits": 4, "group_size": group, "desc_act": desc_act, "sym": False, "lm_head": False,
            "quant_method": "gptq", "checkpoint_format": "gptq_v2" if v2 else "gptq", "pack_dtype": "int32",
            "meta": {"quantizer": ["gptqmodel:5.0.0"], "uri": "https://github.com/modelcloud/gptqmodel",
                     "damp_percent": 0.05, "damp_auto_increment": 0.01, "static_groups": False,
                     "true_sequential": True, "mse": 0.0, "v2": False, "v2_alpha": 0.25,
                     "act_group_aware": False}}


def quantized_default(name):  # attention and routed experts; routers stay float
    return not name.endswith("mlp.gate")


def mixed_quantized(name):
    return ".mlp.experts." in name and ".layers.1." not in name


def mixed_extra(text):
    extra = {}
    for name in linear_names(text):
        if not mixed_quantized(name):
            extra[name] = float_entry()
    # The patterns the exclusions were given as (AutoRound's to_standard_regex form) come too.
    extra[r".*self_attn.*"] = float_entry()
    extra[r".*layers\.1\.mlp\.experts.*"] = float_entry()
    extra[r".*mlp\.gate$"] = float_entry()
    return extra


FORMATS = {
    # The source itself, unquantized (fp32): what `baton quantize --int4` is tested on.
    "float_source": {"kind": "float", "quantized": lambda name: False, "dtype": torch.float32,
                     "head_dtype": torch.float32, "config": lambda text: None},
    "autoround_sym_g32": {"kind": "autoround", "group": 32, "quantized": quantized_default,
                          "dtype": torch.bfloat16, "head_dtype": torch.float32,
                          "config": lambda text: autoround_config(32, {n: float_entry() for n in linear_names(text)
                                                                       if n.endswith("mlp.gate")}),
                          "side_file": "quantization_config.json"},
    "gptq_asym_g64_actorder": {"kind": "gptq_v1", "group": 64, "actorder": True, "quantized": quantized_default,
                               "dtype": torch.float16, "head_dtype": torch.float32,
                               "config": lambda text: gptqmodel_config(64, True, False),
                               "side_file": "quantize_config.json"},
    "gptq_v2_asym_g32": {"kind": "gptq_v2", "group": 32, "quantized": quantized_default,
                         "dtype": torch.bfloat16, "head_dtype": torch.float32,
                         "config": lambda text: gptqmodel_config(32, False, True),
                         "side_file": "quantize_config.json"},
    "fp8_block": {"kind": "fp8", "quantized": quantized_default, "dtype": torch.bfloat16,
                  "head_dtype": torch.float32,
                  "config": lambda text: {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "weight_block_size": [128, 128],
                                          "modules_to_not_convert": ["thinker.lm_head"] + [
                                              n for n in linear_names(text) if n.endswith("mlp.gate")]}},
    "autoround_mixed_g64": {"kind": "autoround", "group": 64, "quantized": mixed_quantized,
                            "dtype": torch.bfloat16, "head_dtype": torch.bfloat16,
                            "config": lambda text: autoround_config(64, mixed_extra(text)),
                            "side_file": "quantization_config.json"},
}


def quantize_module(fmt, name, w, g):
    """{suffix: tensor to store} for the quantized linear `name`."""
    kind = fmt["kind"]
    if kind == "fp8":
        codes, scale_inv = quantize_fp8_block(w)
        return {"weight": ("F8_E4M3", torch.from_numpy(codes), list(codes.shape)), "weight_scale_inv": scale_inv}
    if kind == "autoround":
        codes, scales, zeros, g_idx = quantize_autoround_sym(w, fmt["group"])
    else:
        perm = torch.randperm(w.shape[1], generator=g) if fmt.get("actorder") else None
        codes, scales, zeros, g_idx = quantize_gptq_asym(w, fmt["group"], perm)
        if kind == "gptq_v1" and not bool(((zeros >= 1) & (zeros <= 15)).all()):
            raise ValueError(f"{name}: a zero point of 0 would make v1 readers disagree; change the seed")
    return pack_int4(codes, scales, zeros, g_idx, v1=kind != "gptq_v2")


def shard_of(name):
    if name.startswith(("thinker.visual.", "thinker.audio_tower.", "thinker.model.embed_tokens.",
                        "thinker.model.layers.0.")):
        return 1 if name.startswith(SPLIT_MODULE + ".") and not name.endswith(("qweight", ".weight")) else 0
    if name.startswith("thinker.model.layers."):
        return 1
    return 2


def write_release(name, fmt, config, head_config, source, d):
    text = config["thinker_config"]["text_config"]
    g = torch.Generator().manual_seed(SEED + 1)
    shards = [{}, {}, {}]
    linears = set(linear_names(text))
    for tname, w in source.items():
        if tname.startswith("head."):
            continue
        module = tname[:-len(".weight")] if tname.endswith(".weight") else None
        if module in linears and fmt["quantized"](module):
            for suffix, t in quantize_module(fmt, module, w, g).items():
                shards[shard_of(f"{module}.{suffix}")][f"{module}.{suffix}"] = t
        else:
            shards[shard_of(tname)][tname] = w.to(fmt["dtype"])
    d.mkdir(parents=True)
    config = copy.deepcopy(config)
    config["torch_dtype"] = str(fmt["dtype"]).replace("torch.", "")
    if fmt["config"](text) is not None:
        config["quantization_config"] = fmt["config"](text)
    (d / "config.json").write_text(json.dumps(config, indent=2))
    if "side_file" in fmt:  # the tools write the quantization config beside config.json too
        (d / fmt["side_file"]).write_text(json.dumps(config["quantization_config"], indent=2))
    weight_map, total = {}, 0
    for file, tensors in zip(SHARDS, shards):
        total += write_safetensors(d / file, dict(sorted(tensors.items())))
        weight_map.update({n: file for n in tensors})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (d / "joint_head_config.json").write_text(json.dumps(head_config, indent=2))
    write_safetensors(d / "joint_head.safetensors",
                      {n[len("head."):]: t.to(fmt["head_dtype"]) for n, t in source.items() if n.startswith("head.")})
    for f in TOKENIZER_FILES:
        shutil.copyfile(TINY / "release" / f, d / f)


# ---- reading a release back -----------------------------------------------------------------------

def load_dequantized(d):
    """float32 {name: tensor} of the thinker (towers and talker included, as stored) with every
    quantized linear dequantized from its stored tensors, the head's as 'head.*'; and {name: how the
    weight is stored ('int4', 'fp8' or its dtype), the largest error its rounding allows per element}."""
    config = json.loads((d / "config.json").read_text())
    q = config.get("quantization_config", {})
    index = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    raw = {}
    for shard in sorted(set(index.values())):
        raw.update(read_safetensors(d / shard))
    v1 = (q.get("packing_format") in ("auto_round:auto_gptq", "auto_round:gptq")
          or q.get("checkpoint_format") == "gptq")
    out, limits = {}, {}
    for name, (dtype, a) in raw.items():
        if name.endswith(".qweight"):
            module = name[:-len(".qweight")]
            t = {s: raw[f"{module}.{s}"][1] for s in ("qweight", "qzeros", "scales", "g_idx") if f"{module}.{s}" in raw}
            w = dequantize_int4(t, v1, q["group_size"])
            k = w.shape[1]
            g = t["g_idx"].astype(np.int64) if "g_idx" in t else np.arange(k) // q["group_size"]
            step = np.abs(t["scales"].astype(np.float32))[g].T  # [N, K]
            # half a step where rounded, up to a step where clamped: AutoRound's sym grid is -8..7
            # scale steps with the extreme at -8, so the other side can round to 8 and clamp to 7;
            # asym, the rounded zero point shifts the grid by up to half a step.
            out[module + ".weight"] = torch.from_numpy(w)
            limits[module + ".weight"] = ("int4", torch.from_numpy(step * 1.01))  # + the fp16 scale's rounding
        elif dtype == "F8_E4M3":
            scale_inv = raw[name + "_scale_inv"][1]
            w = dequantize_fp8(a, scale_inv)
            v = np.abs(E4M3[a & 0x7F])  # half an e4m3 ulp of the stored value, times its block's scale
            ulp = np.where(v < 2.0 ** -6, 2.0 ** -9, 2.0 ** (np.floor(np.log2(np.maximum(v, 2.0 ** -6))) - 3))
            s = np.repeat(np.repeat(scale_inv, 128, 0), 128, 1)[:a.shape[0], :a.shape[1]]
            out[name] = torch.from_numpy(w)
            limits[name] = ("fp8", torch.from_numpy((0.5 * ulp * s * 1.001).astype(np.float32)))
        elif not name.endswith(("qzeros", "scales", "g_idx", "_scale_inv")):
            out[name] = torch.from_numpy(a.astype(np.float32))
            limits[name] = (dtype, out[name].abs() * 2.0 ** -8 + 1e-7)
    for name, (dtype, a) in read_safetensors(d / "joint_head.safetensors").items():
        out["head." + name] = torch.from_numpy(a.astype(np.float32))
        limits["head." + name] = (dtype, out["head." + name].abs() * 2.0 ** -8 + 1e-7)
    return config, out, limits


def reference_logits(config, head_config, weights, records):
    """bench/reference_eager.py's forward (thinker_text + joint_schema_head) in float32."""
    text = config["thinker_config"]["text_config"]
    thinker = reference_eager.thinker_text(text, reference_eager.check_config(text),
                                           {n: w for n, w in weights.items() if n.startswith("thinker.")})
    head = reference_eager.joint_schema_head(**head_config).eval()
    head.load_state_dict({n[len("head."):]: w for n, w in weights.items() if n.startswith("head.")}, strict=True)
    lm_head = weights["thinker.lm_head.weight"]
    out = []
    with torch.inference_mode():
        for r in records:
            if not r["ok"]:
                out.append(r)  # a refusal depends on the request only
                continue
            questions = [(x["type"], tuple(x["question_span"]), [tuple(s) for s in x["option_spans"]])
                         for x in r["questions"]]
            logits = head(thinker.forward(r["input_ids"]), r["input_ids"], questions, lm_head).tolist()
            qs = []
            for x in r["questions"]:
                n = len(x["option_spans"])
                qs.append(dict(x, logits=logits[:n]))
                logits = logits[n:]
            out.append({"id": r["id"], "ok": True, "num_tokens": r["num_tokens"], "input_ids": r["input_ids"],
                        "questions": qs})
    return out


def check(d, source, weights=None, limits=None, quiet=False):
    """max |w - w_float| per tensor kind; raises if a tensor is further from the source than its
    storage allows (int4: a step (half where not clamped); fp8: half an e4m3 ulp times the block's
    scale; bf16/fp16: 2^-8 relative)."""
    if weights is None:
        _, weights, limits = load_dequantized(d)
    rows, bad = {}, []
    missing = sorted(n for n in source if not n.startswith(("talker.", "code2wav.")) and n not in weights)
    if missing:
        raise ValueError(f"{d}: missing {missing[:5]}")
    for name, w in weights.items():
        if name.startswith(("talker.", "code2wav.")):
            continue
        stored, limit = limits[name]
        err = (w - source[name]).abs()
        if bool((err > limit).any()):
            bad.append(name)
        k = f"{kind(name)} [{stored}]"
        rows[k] = max(rows.get(k, 0.0), float(err.max()))
    if not quiet:
        print(f"{d}: max |w - w_float| per tensor kind [stored as]")
        for k in sorted(rows):
            print(f"  {k:34s} {rows[k]:.3e}")
    if bad:
        raise ValueError(f"{d}: further from the source than its storage allows: {bad[:5]}")
    return rows


def coverage(name, d):
    """What each release is there to exercise, checked on the written files so that a change of
    seed or dims cannot quietly drop it."""
    index = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    raw = {}
    for shard in sorted(set(index.values())):
        raw.update(read_safetensors(d / shard))
    get = lambda suffix: [a for n, (_, a) in raw.items() if n.endswith(suffix)]
    facts = {}
    if name.startswith("autoround"):
        scales = np.concatenate([a.ravel() for a in get(".scales")])
        facts["negative and positive scales"] = (scales < 0).any() and (scales > 0).any()
        facts["qzeros all 0x77777777"] = all((a == 0x77777777).all() for a in get(".qzeros"))
        facts["no g_idx"] = not get(".g_idx")
    elif name.startswith("gptq"):
        v1 = "v2" not in name
        zeros = [((((a.astype(np.int64) & 0xFFFFFFFF) + (V1_OFFSET if v1 else 0)) & 0xFFFFFFFF)[..., None]
                  >> np.arange(0, 32, 4)) & 15 for a in get(".qzeros")]
        zmin, zmax = min(int(z.min()) for z in zeros), max(int(z.max()) for z in zeros)
        trivial = [(g == np.arange(len(g)) // (len(g) // (g.max() + 1))).all() for g in get(".g_idx")]
        if v1:
            facts["zeros within 1..15"] = zmin >= 1 and zmax <= 15
            facts["every g_idx a permutation's groups"] = not any(trivial) and all(
                (np.bincount(g) == 64).all() for g in get(".g_idx"))
        else:
            facts["zero points 0 and 15 both present"] = zmin == 0 and zmax == 15
            facts["g_idx trivial"] = all(trivial)
    elif name.startswith("fp8"):
        scale_tensors = get(".weight_scale_inv")
        facts["partial blocks"] = any(a.shape[0] % 128 or a.shape[1] % 128
                                      for n, (t, a) in raw.items() if t == "F8_E4M3")
        facts["subnormal codes"] = any(((a & 0x78) == 0).any() and ((a & 7) != 0).any()
                                       for n, (t, a) in raw.items() if t == "F8_E4M3")
        facts["a scale per block, ceil-sized"] = all(
            raw[n + "_scale_inv"][1].shape == (-(-a.shape[0] // 128), -(-a.shape[1] // 128))
            for n, (t, a) in raw.items() if t == "F8_E4M3") and bool(scale_tensors)
    missing = [f for f, ok in facts.items() if not ok]
    if missing:
        raise ValueError(f"{d}: no longer exercises {missing}")


# ---- driver --------------------------------------------------------------------------------------

def main():
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "--expected":
        # Another writer's release of the same records (`baton quantize --int4`'s), read back as
        # this script reads the published formats: what the reference computes on it.
        release, into = Path(sys.argv[2]), Path(sys.argv[3])
        config, weights, _ = load_dequantized(release)
        head_config = json.loads((release / "joint_head_config.json").read_text())
        records = [json.loads(line) for line in (TINY / "expected.jsonl").read_text().splitlines()]
        expected = reference_logits(config, head_config, weights, [r for r in records if "media" not in r])
        into.write_text("".join(json.dumps(r) + "\n" for r in expected))
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        _, _, source = source_model()
        check(Path(sys.argv[2]), source)
        return 0
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__.split("\n\n")[-1])
    out = Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    config, head_config, source = source_model()
    records = [json.loads(line) for line in (TINY / "expected.jsonl").read_text().splitlines()]
    records = [r for r in records if "media" not in r]  # the reference forward here is text-only
    for name, fmt in FORMATS.items():
        d = out / name
        write_release(name, fmt, config, head_config, source, d / "release")
        _, weights, limits = load_dequantized(d / "release")
        check(d / "release", source, weights, limits, quiet=True)
        coverage(name, d / "release")
        expected = reference_logits(config, head_config, weights, records)
        (d / "expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in expected))
    print(f"make_quant_releases: {len(FORMATS)} releases in {out} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
