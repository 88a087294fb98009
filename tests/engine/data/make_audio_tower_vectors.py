#!/usr/bin/python3
"""Writes what the reference's audio tower makes of a record's audio streams of different lengths,
one of them under one 100-frame chunk, for the audio encoder tests (Debian's python3-torch, numpy).

transformers v4.57's Qwen3OmniMoeAudioEncoder.forward (modeling_qwen3_omni_moe.py) takes the
valid frames of every stream of the call concatenated, splits each stream into chunks of
n_window * 2 frames (the last one shorter), and pads the chunk list with pad_sequence: every chunk
of every stream is zero-padded to the longest chunk of the whole call before conv2d1..3 (each
followed by GELU). The padding is not only the convolutions' own zero padding: GELU of a padded
position is GELU(bias), not zero, so the last valid tokens of a chunk shorter than that width see
it. The valid tokens (_get_feat_extract_output_lengths of each chunk) then go through the encoder
layers with attention inside windows of (longest chunk's tokens) * (n_window_infer // (n_window *
2)) per stream, ln_post, proj1, GELU, proj2. That is written out below from the source, in float32
on the CPU, on the audio tower of the release given (the clef-omni-tiny release's random weights).

For each case: OUTDIR/<case>.<i>.mel (float32 [128, frames], row-major) and .mask (int32 [frames]):
the processor's log-mel features of the streams as one padded batch (make_audio_vectors'
batch_log_mel); OUTDIR/<case>.<i>.batch (float32 [tokens, output_dim]): the stream's rows of the
tower's output with all the case's streams in one call; OUTDIR/<case>.<i>.alone: the same stream
in a call of its own (the same features), which is what baton computed before.

Usage: make_audio_tower_vectors.py RELEASE OUTDIR
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_audio_vectors import HOP, batch_log_mel, synthetic_stream  # noqa: E402

PREFIX = "thinker.audio_tower."
# Samples per stream: 2.37 s (237 frames: 100, 100, 37) with 0.61 s (62 frames, under one chunk:
# padded to 100 by the batch); and two streams under one chunk (82 and 62 frames: the shorter
# padded to 82, the batch's longest chunk).
CASES = {"long_and_short": [37930, 9790], "two_short": [13250, 9790]}


def read_tensors(release):
    """The audio tower's tensors of the release's shards, float32 (numpy: no safetensors module)."""
    index = json.loads((release / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for shard in sorted({f for name, f in index.items() if name.startswith(PREFIX)}):
        data = (release / shard).read_bytes()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        for name, entry in header.items():
            if not name.startswith(PREFIX):
                continue
            assert entry["dtype"] == "F32", (name, entry["dtype"])
            begin, end = entry["data_offsets"]
            values = np.frombuffer(data, "<f4", (end - begin) // 4, 8 + size + begin)
            out[name[len(PREFIX):]] = torch.from_numpy(values.reshape(entry["shape"]).copy())
    return out


def output_lengths(frames):
    """_get_feat_extract_output_lengths: 13 tokens per full chunk, three halvings of the rest."""
    rest = frames % 100
    return ((((rest - 1) // 2 + 1) - 1) // 2 + 1 - 1) // 2 + 1 + frames // 100 * 13


def sinusoids(length, channels):
    increment = math.log(10000) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2).float())
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def tower(w, cfg, features, lens, conv_only=False):
    """Qwen3OmniMoeAudioEncoder.forward: features [mel_bins, sum(lens)], the streams' valid frames."""
    n = cfg["n_window"] * 2
    chunk_lengths = []
    for frames in lens:
        chunk_lengths += [n] * (frames // n) + ([frames % n] if frames % n else [])
    chunks = features.T.split(chunk_lengths, dim=0)
    padded = torch.nn.utils.rnn.pad_sequence(chunks, batch_first=True).transpose(1, 2).unsqueeze(1)
    h = padded
    for k in (1, 2, 3):
        h = F.gelu(F.conv2d(h, w[f"conv2d{k}.weight"], w[f"conv2d{k}.bias"], stride=2, padding=1))
    b, c, f, t = h.shape
    h = h.permute(0, 3, 1, 2).reshape(b, t, c * f) @ w["conv_out.weight"].T
    h = h + sinusoids(cfg["max_source_positions"], cfg["d_model"])[:t]
    keep = torch.arange(t)[None, :] < torch.tensor([output_lengths(x) for x in chunk_lengths])[:, None]
    x = h[keep]
    if conv_only:
        return x
    window = t * (cfg["n_window_infer"] // n)
    spans = []
    for frames in lens:
        tokens = output_lengths(frames)
        spans += [window] * (tokens // window) + ([tokens % window] if tokens % window else [])
    heads = cfg["encoder_attention_heads"]
    dim = cfg["d_model"] // heads
    for layer in range(cfg["encoder_layers"]):
        p = f"layers.{layer}."
        a = F.layer_norm(x, (cfg["d_model"],), w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"])
        q, k, v = (F.linear(a, w[p + f"self_attn.{m}_proj.weight"], w[p + f"self_attn.{m}_proj.bias"]).view(-1, heads, dim)
                   for m in "qkv")
        out = []
        for qs, ks, vs in zip(q.split(spans), k.split(spans), v.split(spans)):
            scores = torch.einsum("qhd,khd->hqk", qs, ks) * dim ** -0.5
            out.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs).reshape(-1, cfg["d_model"]))
        x = x + F.linear(torch.cat(out), w[p + "self_attn.out_proj.weight"], w[p + "self_attn.out_proj.bias"])
        a = F.layer_norm(x, (cfg["d_model"],), w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"])
        x = x + F.linear(F.gelu(F.linear(a, w[p + "fc1.weight"], w[p + "fc1.bias"])), w[p + "fc2.weight"], w[p + "fc2.bias"])
    x = F.layer_norm(x, (cfg["d_model"],), w["ln_post.weight"], w["ln_post.bias"])
    return F.linear(F.gelu(F.linear(x, w["proj1.weight"], w["proj1.bias"])), w["proj2.weight"], w["proj2.bias"])


def main():
    release, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((release / "config.json").read_text())["thinker_config"]["audio_config"]
    w = read_tensors(release)
    torch.set_num_threads(1)
    for case, sizes in CASES.items():
        streams = [synthetic_stream(n, 5 + k) for k, n in enumerate(sizes)]
        batch = batch_log_mel(streams)
        lens = [int(mask.sum()) for _, mask in batch]
        valid = [torch.from_numpy(features[:, :frames]) for (features, _), frames in zip(batch, lens)]
        with torch.no_grad():
            together = tower(w, cfg, torch.cat(valid, dim=1), lens).split([output_lengths(x) for x in lens])
            conv_together = tower(w, cfg, torch.cat(valid, dim=1), lens, True).split([output_lengths(x) for x in lens])
            for i, ((features, mask), frames) in enumerate(zip(batch, lens)):
                np.ascontiguousarray(features).astype("<f4").tofile(str(out / f"{case}.{i}.mel"))
                mask.astype("<i4").tofile(str(out / f"{case}.{i}.mask"))
                alone = tower(w, cfg, valid[i], [frames])
                together[i].numpy().astype("<f4").tofile(str(out / f"{case}.{i}.batch"))
                alone.numpy().astype("<f4").tofile(str(out / f"{case}.{i}.alone"))
                # Which tokens the padding reaches before the encoder layers spread it.
                conv_alone = tower(w, cfg, valid[i], [frames], True)
                moved = ((conv_alone - conv_together[i]).abs().amax(1) > 1e-4).nonzero().flatten().tolist()
                print(f"{case} stream {i}: {frames} frames ({sizes[i]} samples, {HOP}-sample hop), "
                      f"{alone.shape[0]} tokens; alone vs batch: conv tokens {moved} differ, output max "
                      f"|difference| {(alone - together[i]).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
