#!/usr/bin/python3
"""Issue 18's comparison, back to back on one machine: the Clef forward as the reference runs it.

Cloudflare's reference runs Clef-Omni through transformers' eager Qwen3-Omni-MoE thinker and its own
JointSchemaHead (torch.nn modules). transformers is not in Debian, so this script computes the same
thing with the same operations on Debian's python3-torch:

  - the thinker's text model as transformers' eager code does it: RMSNorm in fp32, q/k norms,
    rotate-half RoPE (text positions: MRoPE's three streams are equal), repeat_kv, the whole score
    square with an additive causal mask and an fp32 softmax, and the MoE as a loop over the experts
    that got tokens (one-hot mask, torch.where, three nn.Linear products, index_add_);
  - the head with nn.LayerNorm, nn.MultiheadAttention and nn.TransformerDecoderLayer, as
    Cloudflare's reference joint_schema_model.py has it, in the release's dtype (the reference moves it there).

The weights are copied into the process at load, in one dtype, as from_pretrained does, and glibc
malloc runs with mmap and trimming off, the settings issue 18 measured the reference with (the
script re-executes itself with them).

It reads a release written by `clef_forward` (build/bench-release-*), builds the same record
(bench/random_release.hpp's make_bench_record: same ids, same question spans), times forwards and
prints the logits in clef_forward's order, so the two can be checked against each other before
their times are compared.

  bench/reference_eager.py --dir build/bench-release-f32-transformers [--tokens 512,2048]
                           [--warmup 1] [--runs 3] [--threads 2] [--json]
  bench/reference_eager.py --vectors tests/data/vectors/clef-omni-tiny [--dtype bf16] [--tolerance 1e-5]

--vectors checks it against what Cloudflare's reference computed on the tiny release's text records
(test_reference_eager). --dtype casts the weights at load, as from_pretrained's torch_dtype does.
"""

import argparse
import json
import math
import mmap
import os
import statistics
import struct
import sys
import time
import warnings

MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**62)}
if __name__ == "__main__" and any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV})

try:  # after the re-exec: the allocator settings must hold from the start
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    sys.exit("reference_eager: needs Debian's python3-torch: run it with /usr/bin/python3")

MASK64 = (1 << 64) - 1
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


# ---- the bench record (bench/random_release.hpp) ------------------------------------------------

def bench_record(tokens, vocab):
    s = (tokens * 7919 + 1) & MASK64  # xorshift, seeded by the length as clef_forward seeds it
    ids = []
    for _ in range(tokens):
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        ids.append(((s * 0x2545F4914F6CDD1D) & MASK64) % vocab)
    types, option_counts = (1, 0, 2), (4, 2, 8)
    length = sum(12 + sum(8 + (o * 3) % 5 for o in range(n)) for n in option_counts)
    at = tokens - 4 - length
    if at < 0:
        raise ValueError(f"records need at least {length + 4} tokens")
    questions = []
    for q in range(3):
        question = (at, at + 12)
        at += 12
        options = []
        for o in range(option_counts[q]):
            n = 8 + (o * 3) % 5
            options.append((at, at + n))
            at += n
        questions.append((types[q], question, options))
    return ids, questions


# ---- the release ---------------------------------------------------------------------------------

def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_safetensors(path, keep, out, dtype=None):
    """The tensors `keep` names, copied into the process (in `dtype` when given: one copy either way)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + size])
        for name, entry in header.items():
            if name == "__metadata__" or not keep(name):
                continue
            if entry["dtype"] not in SAFETENSORS_DTYPES:
                raise ValueError(f"{path}: {name}: dtype {entry['dtype']}, not one of {list(SAFETENSORS_DTYPES)}")
            stored = SAFETENSORS_DTYPES[entry["dtype"]]
            begin, end = entry["data_offsets"]
            count = (end - begin) * 8 // torch.finfo(stored).bits
            if count == 0:
                raise ValueError(f"{path}: {name} is empty")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a read-only view, copied at once
                view = torch.frombuffer(data, dtype=stored, count=count, offset=8 + size + begin)
            out[name] = view.reshape(entry["shape"]).to(dtype or stored, copy=True)  # as from_pretrained
            del view  # the mapping closes only once no view of it is left


def check_config(config):
    """What this script computes, and nothing else: a clear error rather than other numbers."""
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    theta = config.get("rope_theta", rope.get("rope_theta"))
    problems = []
    if theta is None:
        problems.append("no rope_theta")
    if rope.get("rope_type", "default") != "default":
        problems.append(f"rope_type {rope.get('rope_type')}")
    if config.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {config.get('hidden_act')}")
    if config.get("attention_bias", False):
        problems.append("attention_bias")
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        problems.append("dense layers (mlp_only_layers, decoder_sparse_step)")
    if problems:
        raise ValueError("the text config has what this script does not compute: " + ", ".join(problems))
    return theta


def load_release(directory, dtype=None):
    text = read_json(os.path.join(directory, "config.json"))["thinker_config"]["text_config"]
    rope_theta = check_config(text)
    head_config = read_json(os.path.join(directory, "joint_head_config.json"))
    index = os.path.join(directory, "model.safetensors.index.json")
    shards = sorted(set(read_json(index)["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    weights = {}
    for shard in shards:  # the text model only: a text record never runs the towers
        read_safetensors(os.path.join(directory, shard),
                         lambda name: name.startswith(("thinker.model.", "thinker.lm_head.")), weights, dtype)
    if dtype is None:  # one dtype, as from_pretrained: the embedding's (a no-op for a uniform release)
        dtype = weights["thinker.model.embed_tokens.weight"].dtype
        weights = {name: t.to(dtype) for name, t in weights.items()}
    head_weights = {}
    read_safetensors(os.path.join(directory, "joint_head.safetensors"), lambda name: True, head_weights)
    return text, rope_theta, head_config, weights, head_weights


# ---- the thinker's text model, as transformers' eager code runs it -------------------------------

def rms_norm(x, weight, eps):
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class thinker_text:
    def __init__(self, config, rope_theta, weights):
        self.config, self.rope_theta, self.weights = config, rope_theta, weights
        self.eps = config["rms_norm_eps"]
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config["head_dim"]
        self.dtype = weights["thinker.model.embed_tokens.weight"].dtype

    def layer_weight(self, layer, name):
        return self.weights[f"thinker.model.layers.{layer}.{name}"]

    def attention(self, layer, x, cos, sin, mask):
        t = x.shape[1]
        q = F.linear(x, self.layer_weight(layer, "self_attn.q_proj.weight")).view(1, t, self.heads, self.head_dim)
        k = F.linear(x, self.layer_weight(layer, "self_attn.k_proj.weight")).view(1, t, self.kv_heads, self.head_dim)
        v = F.linear(x, self.layer_weight(layer, "self_attn.v_proj.weight")).view(1, t, self.kv_heads, self.head_dim)
        q = rms_norm(q, self.layer_weight(layer, "self_attn.q_norm.weight"), self.eps).transpose(1, 2)
        k = rms_norm(k, self.layer_weight(layer, "self_attn.k_norm.weight"), self.eps).transpose(1, 2)
        v = v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads  # repeat_kv
        shape = (1, self.kv_heads, repeat, t, self.head_dim)
        k = k[:, :, None].expand(shape).reshape(1, self.heads, t, self.head_dim)
        v = v[:, :, None].expand(shape).reshape(1, self.heads, t, self.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5 + mask
        scores = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(scores, v).transpose(1, 2).reshape(1, t, self.heads * self.head_dim)
        return F.linear(out, self.layer_weight(layer, "self_attn.o_proj.weight"))

    def moe(self, layer, x):
        experts, top_k = self.config["num_experts"], self.config["num_experts_per_tok"]
        hidden = x.view(-1, x.shape[-1])
        router_logits = F.linear(hidden, self.layer_weight(layer, "mlp.gate.weight"))
        routing = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing, selected = torch.topk(routing, top_k, dim=-1)
        if self.config.get("norm_topk_prob", True):
            routing /= routing.sum(dim=-1, keepdim=True)
        routing = routing.to(hidden.dtype)
        out = torch.zeros_like(hidden)
        mask = F.one_hot(selected, num_classes=experts).permute(2, 1, 0)
        for expert in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():
            e = int(expert)
            slot, rows = torch.where(mask[expert].squeeze(0))  # indexed by a tensor: a copy, as transformers
            state = hidden[None, rows].reshape(-1, hidden.shape[-1])
            gate = F.linear(state, self.layer_weight(layer, f"mlp.experts.{e}.gate_proj.weight"))
            up = F.linear(state, self.layer_weight(layer, f"mlp.experts.{e}.up_proj.weight"))
            y = F.linear(F.silu(gate) * up, self.layer_weight(layer, f"mlp.experts.{e}.down_proj.weight"))
            out.index_add_(0, rows, (y * routing[rows, slot, None]).to(hidden.dtype))  # a no-op cast, kept as there
        return out.view(x.shape)

    def forward(self, ids):
        t = len(ids)
        x = F.embedding(torch.tensor([ids]), self.weights["thinker.model.embed_tokens.weight"])
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim))
        freqs = torch.arange(t, dtype=torch.float)[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)  # in fp32, then cast, as the rotary embedding does
        cos, sin = angles.cos().to(self.dtype)[None, None], angles.sin().to(self.dtype)[None, None]
        mask = torch.full((t, t), torch.finfo(self.dtype).min, dtype=self.dtype).triu(1)[None, None]
        for layer in range(self.config["num_hidden_layers"]):
            residual = x
            x = rms_norm(x, self.layer_weight(layer, "input_layernorm.weight"), self.eps)
            x = residual + self.attention(layer, x, cos, sin, mask)
            residual = x
            x = rms_norm(x, self.layer_weight(layer, "post_attention_layernorm.weight"), self.eps)
            x = residual + self.moe(layer, x)
        return rms_norm(x, self.weights["thinker.model.norm.weight"], self.eps)[0]


# ---- the joint schema head (Cloudflare's reference joint_schema_model.py) ----------------------------------------------

class evidence_layer(nn.Module):
    def __init__(self, width, heads, feedforward):
        super().__init__()
        self.query_norm, self.memory_norm = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.feedforward_norm = nn.LayerNorm(width)
        # The dropout slots keep the Sequential indices the checkpoint's keys use (0 and 3).
        self.feedforward = nn.Sequential(nn.Linear(width, feedforward), nn.GELU(), nn.Dropout(0.0),
                                         nn.Linear(feedforward, width), nn.Dropout(0.0))

    def forward(self, options, memory):
        # The memory is normalised once for the keys and once for the values, as the reference
        # does: two tensors, so nn.MultiheadAttention projects them separately.
        attended = self.attention(self.query_norm(options), self.memory_norm(memory), self.memory_norm(memory),
                                  need_weights=False)[0]
        options = options + attended
        return options + self.feedforward(self.feedforward_norm(options))


class joint_schema_head(nn.Module):
    # dropout: an optional key of joint_head_config.json, inactive at inference (spec §3.1).
    def __init__(self, hidden_size, width, routing_layers, layers, heads, feedforward, dropout=0.0):
        super().__init__()
        self.width = width
        self.hidden_norm = nn.LayerNorm(hidden_size)
        for name in ("memory", "question", "option_question", "global", "option_context", "option_lexical"):
            setattr(self, f"{name}_projection", nn.Linear(hidden_size, width, bias=False))
        self.type_embedding = nn.Embedding(3, width)
        self.evidence_layers = nn.ModuleList(evidence_layer(width, heads, feedforward)
                                             for _ in range(routing_layers))
        self.option_summary_norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(width, heads, feedforward, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers))
        self.field_norm, self.option_norm = nn.LayerNorm(width), nn.LayerNorm(width)
        self.residual_scorer = nn.Sequential(nn.Linear(4 * width, width), nn.GELU(), nn.Dropout(0.0),
                                             nn.Linear(width, 1))
        self.prior_logit_scale = nn.Parameter(torch.zeros(()))
        self.joint_logit_scale = nn.Parameter(torch.zeros(()))
        self.residual_gate = nn.Parameter(torch.zeros(()))

    def forward(self, states, ids, questions, lm_head):
        s = self.hidden_norm(states)
        memory = self.memory_projection(s)[None]
        g = s[-1]
        q = torch.stack([s[begin:end].mean(0) for _, (begin, end), _ in questions])
        spans = [(i, begin, end) for i, (_, _, options) in enumerate(questions) for begin, end in options]
        context = torch.stack([s[begin:end].mean(0) for _, begin, end in spans])
        lexical = torch.stack([lm_head[torch.tensor(ids[begin:end])].mean(0) for _, begin, end in spans])
        owner = torch.tensor([i for i, _, _ in spans])
        options = (self.option_context_projection(context) + self.option_lexical_projection(lexical)
                   + self.option_question_projection(q)[owner])[None]
        for layer in self.evidence_layers:
            options = layer(options, memory)
        options = options[0]
        b = self.question_projection(q)
        summaries = []
        for i in range(len(questions)):
            own = options[owner == i]
            weights = torch.softmax(own @ b[i] / math.sqrt(self.width), dim=0)
            summaries.append(weights @ own)
        types = torch.tensor([question_type for question_type, _, _ in questions])
        fields = (b + self.option_summary_norm(torch.stack(summaries)) + self.global_projection(g)
                  + self.type_embedding(types))[None]
        for layer in self.layers:
            fields = layer(fields, memory)
        fields = self.field_norm(fields)[0][owner]
        o = self.option_norm(options)
        cap = math.log(100.0)
        prior = torch.exp(torch.clamp(self.prior_logit_scale, max=cap)) * (
            F.normalize(lexical, dim=-1) * F.normalize(q[owner] + g, dim=-1)).sum(-1)
        cos = F.cosine_similarity(fields, o, dim=-1, eps=1e-8)
        residual = self.residual_scorer(torch.cat([fields, o, fields * o, (fields - o).abs()], dim=-1))[:, 0]
        return prior + torch.sigmoid(self.residual_gate) * (
            torch.exp(torch.clamp(self.joint_logit_scale, max=cap)) * cos + residual)


# ---- driver --------------------------------------------------------------------------------------

def build(directory, dtype=None):
    text, rope_theta, head_config, weights, head_weights = load_release(directory, dtype)
    thinker = thinker_text(text, rope_theta, weights)
    head = joint_schema_head(**head_config).eval()
    head.load_state_dict(head_weights, strict=True)
    head.to(thinker.dtype)  # the reference runs the head in the backbone's dtype
    return text, thinker, head, weights["thinker.lm_head.weight"]


def check_vectors(directory, dtype, tolerance):
    """The text records of a reference vector folder (clef-omni-tiny): their logits against the
    ones Cloudflare's reference computed, which shows this script computes what the reference does."""
    _, thinker, head, lm_head = build(os.path.join(directory, "release"), dtype)
    worst, records = 0.0, 0
    with torch.inference_mode(), open(os.path.join(directory, "expected.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            if not record["ok"] or "media" in record:
                continue
            questions = [(q["type"], tuple(q["question_span"]), [tuple(span) for span in q["option_spans"]])
                         for q in record["questions"]]
            logits = head(thinker.forward(record["input_ids"]), record["input_ids"], questions, lm_head)
            expected = torch.tensor([v for q in record["questions"] for v in q["logits"]])
            if logits.shape != expected.shape:
                raise ValueError(f"{record['id']}: {logits.numel()} logits, the reference has {expected.numel()}")
            diff = float((logits.float() - expected).abs().max())
            print(f"  {record['id']}: {len(record['input_ids'])} tokens, max |logit - reference| {diff:.2g}")
            worst, records = max(worst, diff), records + 1
    if records == 0:
        raise ValueError(f"{directory}: no text records in expected.jsonl")
    print(f"{records} records in {thinker.dtype}, max |logit - reference| {worst:.2g} (tolerance {tolerance:g})")
    return 0 if worst <= tolerance else 1


def time_forwards(args):
    started = time.perf_counter()
    text, thinker, head, lm_head = build(args.dir, DTYPES.get(args.dtype))
    load_ms = (time.perf_counter() - started) * 1e3
    results = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        ids, questions = bench_record(tokens, text["vocab_size"])
        times = []
        with torch.inference_mode():
            for run in range(args.warmup + args.runs):
                began = time.perf_counter()
                logits = head(thinker.forward(ids), ids, questions, lm_head)
                if run >= args.warmup:
                    times.append((time.perf_counter() - began) * 1e3)
        results.append({"tokens": tokens,
                        "forward_ms": {"median": statistics.median(times), "min": min(times), "max": max(times)},
                        "logits": [float(v) for v in logits.float()]})
    info = {"release": args.dir, "dtype": str(thinker.dtype).replace("torch.", ""), "threads": args.threads,
            "torch": torch.__version__, "load_ms": load_ms, "results": results}
    if args.json:
        print(json.dumps(info))
        return
    print(f"reference (transformers eager, re-written): {args.dir}, {info['dtype']}, {args.threads} threads, "
          f"torch {torch.__version__}, load {load_ms:.0f} ms")
    for result in results:
        forward = result["forward_ms"]
        print(f"  {result['tokens']} tokens: forward {forward['median']:.1f} ms (median of {args.runs}; "
              f"{forward['min']:.1f}-{forward['max']:.1f})")
        print("    logits: " + " ".join(f"{v:.9g}" for v in result["logits"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", help="a release written by clef_forward: time its forwards")
    parser.add_argument("--vectors", help="instead: check the text records of a reference vector folder")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="cast the weights at load (default: the release's)")
    parser.add_argument("--tokens", default="512,2048", help="with --dir")
    parser.add_argument("--warmup", type=int, default=1, help="with --dir")
    parser.add_argument("--runs", type=int, default=3, help="with --dir")
    parser.add_argument("--json", action="store_true", help="with --dir")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-5, help="with --vectors: on the float32 logits")
    args = parser.parse_args()
    if (args.dir is None) == (args.vectors is None):
        parser.error("give --dir or --vectors")
    if args.runs < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--runs and --threads must be positive, --warmup non-negative")
    torch.set_num_threads(args.threads)
    if args.vectors:
        return check_vectors(args.vectors, DTYPES.get(args.dtype), args.tolerance)
    time_forwards(args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, KeyError, ValueError) as e:  # a missing or malformed release
        sys.exit(f"reference_eager: {type(e).__name__}: {e}")
