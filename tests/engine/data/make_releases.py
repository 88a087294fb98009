#!/usr/bin/python3
"""Writes tiny Clef-Omni releases for the loader tests: OUTDIR/valid and one broken copy per
directory (OUTDIR/<variant>). Random weights (fixed seed); nothing here is a real checkpoint.

Usage: make_releases.py OUTDIR
"""
import copy
import json
import shutil
import struct
import sys
from pathlib import Path

import torch

SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
          "model-00003-of-00003.safetensors"]
DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16"}

TEXT = {
    "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 24, "num_experts": 4,
    "num_experts_per_tok": 2, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096, "rope_theta": 1000000.0,
    "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "interleaved": True},
    "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
}
# Small media encoders: the loader checks their tensors against these (transformers' modeling_qwen3_omni_moe.py).
VISION = {"depth": 2, "hidden_size": 8, "intermediate_size": 12, "num_heads": 2, "in_channels": 3,
          "patch_size": 4, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 32,
          "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}
AUDIO = {"num_mel_bins": 16, "d_model": 8, "encoder_layers": 1, "encoder_attention_heads": 2,
         "encoder_ffn_dim": 16, "downsample_hidden_size": 4, "output_dim": 32}
HEAD = {"hidden_size": 32, "width": 16, "routing_layers": 1, "layers": 1, "heads": 2,
        "feedforward": 32, "dropout": 0.1}


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # keeps the data 8-byte aligned, as the safetensors writer does
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def text_tensors(c):
    """{name: shape} in the loader's order (release.cpp expected_text_tensors)."""
    h, i, d = c["hidden_size"], c["moe_intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    out = {"thinker.model.embed_tokens.weight": (c["vocab_size"], h)}
    for l in range(c["num_hidden_layers"]):
        p = f"thinker.model.layers.{l}."
        out.update({p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (q, h),
                    p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.v_proj.weight": (kv, h),
                    p + "self_attn.o_proj.weight": (h, q), p + "self_attn.q_norm.weight": (d,),
                    p + "self_attn.k_norm.weight": (d,), p + "post_attention_layernorm.weight": (h,),
                    p + "mlp.gate.weight": (c["num_experts"], h)})
        for e in range(c["num_experts"]):
            x = f"{p}mlp.experts.{e}."
            out.update({x + "gate_proj.weight": (i, h), x + "up_proj.weight": (i, h),
                        x + "down_proj.weight": (h, i)})
    out.update({"thinker.model.norm.weight": (h,), "thinker.lm_head.weight": (c["vocab_size"], h)})
    return out


def head_tensors(c):
    """{name: shape} of the joint head (release.cpp expected_head_tensors)."""
    h, w, f = c["hidden_size"], c["width"], c["feedforward"]
    out = {"hidden_norm.weight": (h,), "hidden_norm.bias": (h,)}
    norm = lambda n: out.update({n + ".weight": (w,), n + ".bias": (w,)})
    linear = lambda n, o, i: out.update({n + ".weight": (o, i), n + ".bias": (o,)})
    mha = lambda n: out.update({n + ".in_proj_weight": (3 * w, w), n + ".in_proj_bias": (3 * w,),
                                n + ".out_proj.weight": (w, w), n + ".out_proj.bias": (w,)})
    for p in ["memory", "question", "option_question", "global", "option_context", "option_lexical"]:
        out[p + "_projection.weight"] = (w, h)
    out["type_embedding.weight"] = (3, w)
    for r in range(c["routing_layers"]):
        p = f"evidence_layers.{r}."
        for n in ["query_norm", "memory_norm"]:
            norm(p + n)
        mha(p + "attention")
        norm(p + "feedforward_norm")
        linear(p + "feedforward.0", f, w)
        linear(p + "feedforward.3", w, f)
    norm("option_summary_norm")
    for l in range(c["layers"]):
        p = f"layers.{l}."
        mha(p + "self_attn")
        mha(p + "multihead_attn")
        linear(p + "linear1", f, w)
        linear(p + "linear2", w, f)
        for n in ["norm1", "norm2", "norm3"]:
            norm(p + n)
    norm("field_norm")
    norm("option_norm")
    linear("residual_scorer.0", w, 4 * w)
    linear("residual_scorer.3", 1, w)
    out.update({"prior_logit_scale": (), "joint_logit_scale": (), "residual_gate": ()})
    return out


def media_tensors(v, a):
    """{name: shape} of the vision and audio encoders, written out independently of release.cpp."""
    out = {}

    def linear(n, o, i):
        out.update({n + ".weight": (o, i), n + ".bias": (o,)})

    def norm(n, w):
        out.update({n + ".weight": (w,), n + ".bias": (w,)})

    h = v["hidden_size"]
    m = h * v["spatial_merge_size"] ** 2
    p = "thinker.visual."
    out[p + "patch_embed.proj.weight"] = (h, v["in_channels"], v["temporal_patch_size"],
                                          v["patch_size"], v["patch_size"])
    out[p + "patch_embed.proj.bias"] = (h,)
    out[p + "pos_embed.weight"] = (v["num_position_embeddings"], h)
    for b in range(v["depth"]):
        x = f"{p}blocks.{b}."
        norm(x + "norm1", h), norm(x + "norm2", h)
        linear(x + "attn.qkv", 3 * h, h), linear(x + "attn.proj", h, h)
        linear(x + "mlp.linear_fc1", v["intermediate_size"], h)
        linear(x + "mlp.linear_fc2", h, v["intermediate_size"])
    norm(p + "merger.ln_q", h)
    linear(p + "merger.mlp.0", m, m), linear(p + "merger.mlp.2", v["out_hidden_size"], m)
    for i in range(len(v["deepstack_visual_indexes"])):
        x = f"{p}merger_list.{i}."
        norm(x + "ln_q", m), linear(x + "mlp.0", m, m), linear(x + "mlp.2", v["out_hidden_size"], m)

    d, dh = a["d_model"], a["downsample_hidden_size"]
    p = "thinker.audio_tower."
    linear(p + "conv2d1", dh, 1)
    out[p + "conv2d1.weight"] = (dh, 1, 3, 3)
    for c in ("conv2d2", "conv2d3"):
        out.update({f"{p}{c}.weight": (dh, dh, 3, 3), f"{p}{c}.bias": (dh,)})
    out[p + "conv_out.weight"] = (d, dh * a["num_mel_bins"] // 8)
    for l in range(a["encoder_layers"]):
        x = f"{p}layers.{l}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(x + "self_attn." + proj, d, d)
        norm(x + "self_attn_layer_norm", d), norm(x + "final_layer_norm", d)
        linear(x + "fc1", a["encoder_ffn_dim"], d), linear(x + "fc2", d, a["encoder_ffn_dim"])
    norm(p + "ln_post", d), linear(p + "proj1", d, d), linear(p + "proj2", a["output_dim"], d)
    return out


def weights(shape, dtype):
    return (torch.randn(shape) * 0.1).to(dtype)


class Release:
    def __init__(self):
        torch.manual_seed(0)
        self.config = {"model_type": "qwen3_omni_moe",
                       "thinker_config": {"text_config": copy.deepcopy(TEXT),
                                          "vision_config": dict(VISION), "audio_config": dict(AUDIO)}}
        self.head_config = dict(HEAD)
        self.shards = [{}, {}]  # layer 0 and the media encoders in the first, the rest in the second
        for name, shape in text_tensors(TEXT).items():
            second = ".layers.0." not in name and name != "thinker.model.embed_tokens.weight"
            self.shards[second][name] = weights(shape, torch.bfloat16)
        for name, shape in media_tensors(VISION, AUDIO).items():
            self.shards[0][name] = weights(shape, torch.bfloat16)
        self.head = {n: weights(s, torch.float32) for n, s in head_tensors(HEAD).items()}
        # Listed in the index, placed in a third shard that is not a safetensors file at all.
        self.skipped = ["talker.model.norm.weight", "code2wav.code_embedding.weight"]

    @property
    def text(self):
        return self.config["thinker_config"]["text_config"]

    def write(self, d):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(self.config, indent=2))
        weight_map = {n: SHARDS[2] for n in self.skipped}
        for file, tensors in zip(SHARDS, self.shards):
            write_safetensors(d / file, tensors)
            weight_map.update({n: file for n in tensors})
        (d / SHARDS[2]).write_bytes(b"garbage: skipped shards must never be opened\n")
        total = sum(t.numel() * t.element_size() for s in self.shards for t in s.values())
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        (d / "joint_head_config.json").write_text(json.dumps(self.head_config, indent=2))
        write_safetensors(d / "joint_head.safetensors", self.head)


def missing_tensor(r, d):
    del r.shards[1]["thinker.model.layers.1.mlp.experts.3.down_proj.weight"]
    r.write(d)


def wrong_shape(r, d):
    r.shards[1]["thinker.model.layers.1.self_attn.q_proj.weight"] = weights((48, 32), torch.bfloat16)
    r.write(d)


def truncated_shard(r, d):
    r.write(d)
    shard = (d / SHARDS[1]).read_bytes()
    data_begin = 8 + struct.unpack("<Q", shard[:8])[0]
    (d / SHARDS[1]).write_bytes(shard[:data_begin + (len(shard) - data_begin) // 2])


def bad_index(r, d):
    r.write(d)
    (d / "model.safetensors.index.json").write_text('{"weight_map": {"thinker.lm_head.weight": ')


def index_missing_shard(r, d):
    r.write(d)
    (d / SHARDS[1]).unlink()


def bad_config(r, d):
    del r.text["num_experts"]
    r.write(d)


def bad_rope(r, d):
    r.text["rope_scaling"]["mrope_section"] = [4, 2, 1]
    r.write(d)


def unexpected_tensor(r, d):
    r.shards[0]["thinker.model.layers.0.mlp.shared_expert.weight"] = weights((24, 32), torch.bfloat16)
    r.write(d)


def media_wrong_shape(r, d):
    r.shards[0]["thinker.visual.blocks.1.attn.qkv.weight"] = weights((24, 9), torch.bfloat16)
    r.write(d)


def media_missing(r, d):
    del r.shards[0]["thinker.audio_tower.layers.0.fc2.bias"]
    r.write(d)


def media_unexpected(r, d):
    r.shards[0]["thinker.visual.blocks.2.norm1.weight"] = weights((8,), torch.bfloat16)
    r.write(d)


def head_wrong_shape(r, d):
    r.head["layers.0.linear1.weight"] = weights((32, 8), torch.float32)
    r.write(d)


def head_missing(r, d):
    r.write(d)
    (d / "joint_head.safetensors").unlink()


def head_hidden_mismatch(r, d):
    r.head_config["hidden_size"] = 48
    r.write(d)


def rope_parameters(r, d):
    # transformers 5: rope_theta moves inside rope_parameters, which replaces rope_scaling.
    r.text["rope_parameters"] = dict(r.text.pop("rope_scaling"), rope_theta=r.text.pop("rope_theta"))
    r.write(d)


def main():
    out = Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    base = Release()
    base.write(out / "valid")
    for variant in [missing_tensor, wrong_shape, truncated_shard, bad_index, index_missing_shard,
                    bad_config, bad_rope, unexpected_tensor, media_wrong_shape, media_missing,
                    media_unexpected, head_wrong_shape, head_missing,
                    head_hidden_mismatch, rope_parameters]:
        variant(copy.deepcopy(base), out / variant.__name__)


if __name__ == "__main__":
    main()
