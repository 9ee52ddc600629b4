#!/usr/bin/env python3
"""Real PyTorch workloads under vrampool and under PyTorch's own allocators, on one GPU.

Six workloads (the ones the traces in traces/ were recorded from), each run in its own process under one
allocator mode:

  resnet_train_fixed  torchvision ResNet-50 training, batch 64 at 224x224, SGD with momentum, 8 timed steps
                      (after 1 warm-up step that is not timed), fixed shapes
  gpt_train_varlen    GPT-2 small (12 layers, 768 wide, random weights, built from GPT2Config) training with
                      AdamW and bf16 autocast, 20 timed steps (after 1 warm-up step that is not timed); batch in
                      4..32 and sequence length 64..1024 drawn each step from a seeded RNG
  gpt_serve           GPT-2 small in bf16, `generate` with a KV cache (greedy), 12 requests: batch in {1,2,4,8},
                      prompt 16..512 tokens, 32..128 new tokens (exactly: min_new_tokens = max_new_tokens); all
                      12 requests are timed, there is no warm-up
  vit_train_amp       timm ViT-B/16 training, batch 64 at 224x224 (one fixed batch), AdamW, bf16 autocast, 6 timed
                      steps after 1 warm-up step
  llama_train_ckpt_varlen
                      a Llama-style decoder (8 layers, 1024 wide, grouped-query attention, random weights) training
                      with activation checkpointing, AdamW, bf16 autocast, 12 timed steps after 1 warm-up step;
                      batch in {2,4,8} and sequence length 128..2048 drawn each step
  bert_serve_dynbatch BERT-base fp16 inference as a server sees it: 150 requests, batch in {1..64} and sequence
                      length 16..512 drawn at random; all timed, no warm-up

Five more, of kinds the traces do not hold, to check the default on workloads it was not tuned on (run them by
name; `drive` without --workloads runs the six above):

  resnet_infer        torchvision ResNet-50 inference in fp32, 40 requests of a batch in {1, 8, 16, 32, 64} drawn
                      at random, under inference_mode; all timed, no warm-up
  unet_train_randres  a diffusion U-Net (four levels of 128 to 512 channels, residual blocks with a timestep
                      embedding, self-attention at the two lowest levels) trained to predict noise on latents of 4
                      channels, batch 8, a resolution drawn each step from 32x32 to 96x96 in steps of 8, AdamW,
                      bf16 autocast, 12 timed steps after 1 warm-up step
  resnet_bert_mixed   two models in one process: a ResNet-50 training step (batch 32, SGD) then 4 BERT-base fp16
                      requests (batch in {1..32}, length 16..384), 10 timed rounds after 1 warm-up round
  prefetch_two_streams
                      ResNet-50 training (batch 64) whose next batch is made on a side stream while the current one
                      trains: uint8 images copied from pinned memory, cast, normalised and cropped at random on
                      the side stream, handed over with record_stream; 12 timed steps after 1 warm-up step
  moe_train_routing   a decoder of 4 layers (1024 wide, 8 heads) whose feed-forward is a mixture of 8 experts with
                      top-2 routing (each expert's tokens gathered, computed and scattered back, so their sizes
                      follow the router), AdamW, bf16 autocast, batch in {4, 8} and sequence length 256..1024
                      drawn each step, 12 timed steps after 1 warm-up step

Modes:

  vrampool            vrampool.install() with the default config (the adaptive pool on CUDA virtual memory)
  vrampool-advised    vrampool.install(conf) with a config string given per workload (--advised ...)
  pytorch             PyTorch's default caching allocator
  expandable          PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cudamallocasync     PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  nocache             PYTORCH_NO_CUDA_MEMORY_CACHING=1

Commands:

  run     one workload under one mode in this process; prints one JSON line on stdout (everything else goes
          to stderr): wall time of the timed steps, per-step losses (training) or generated token counts
          (generation), peak reserved and allocated bytes (vrampool: its own stats; PyTorch:
          torch.cuda.max_memory_reserved/allocated), and the driver's used memory (torch.cuda.mem_get_info)
          at the start and at the end
  drive   runs every (workload, mode) --reps times, each in a fresh process, each round of modes starting one
          mode later than the one before, after --warmup untimed runs (and PyTorch's default --extra more
          times, to measure its own loss spread), appends each run to OUT/runs.jsonl, and writes
          OUT/pytorch-e2e.md (a table: median wall time, peaks, utilization, loss difference) and
          OUT/pytorch-e2e.json
  report  rewrites the table and the JSON from OUT/runs.jsonl (after runs split over several drive calls)

--deterministic (run and drive): PyTorch's deterministic kernels (torch.use_deterministic_algorithms, cuDNN
deterministic without autotuning, CUBLAS_WORKSPACE_CONFIG=:4096:8, attention by the math kernel), so that runs
with the same seed compute the same losses bit for bit whatever allocator serves them: PyTorch default's own
spread is then 0 and another mode's losses agree only when they are identical. A check of the allocator (a block
handed out twice, or reused while a kernel still reads it, changes the numbers). Its wall times are those of
slower kernels: they compare modes within such runs (they vary less than the default kernels'), not with the
default kernels' times. Runs of both kinds may not share an OUT folder.

Example (about 3, 6 and 6 minutes on one H200 with the defaults; split so each call stays under 10 minutes):

  cargo build --release -p vrampool-capi
  python3 scripts/pytorch-e2e.py drive --out e2e --workloads resnet_train_fixed --advised resnet_train_fixed CONF
  python3 scripts/pytorch-e2e.py drive --out e2e --workloads gpt_train_varlen --advised gpt_train_varlen CONF
  python3 scripts/pytorch-e2e.py drive --out e2e --workloads gpt_serve --advised gpt_serve CONF
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
WORKLOADS = (
    "resnet_train_fixed",
    "gpt_train_varlen",
    "gpt_serve",
    "vit_train_amp",
    "llama_train_ckpt_varlen",
    "bert_serve_dynbatch",
)
#: Workloads of kinds the traces do not hold: checks of the default on workloads it was not tuned on.
MORE_WORKLOADS = (
    "resnet_infer",
    "unet_train_randres",
    "resnet_bert_mixed",
    "prefetch_two_streams",
    "moe_train_routing",
)
ALL_WORKLOADS = WORKLOADS + MORE_WORKLOADS
MODES = ("vrampool", "vrampool-advised", "pytorch", "expandable", "cudamallocasync", "nocache")
TRAINING = (
    "resnet_train_fixed",
    "gpt_train_varlen",
    "vit_train_amp",
    "llama_train_ckpt_varlen",
    "unet_train_randres",
    "resnet_bert_mixed",
    "prefetch_two_streams",
    "moe_train_routing",
)
MIB = 1 << 20
#: The pool's counters reported for the timed part of a run alone.
TIMED_POOL_COUNTERS = (
    "allocations",
    "fallbacks",
    "growths",
    "backend_calls",
    "chunks_moved",
    "chunks_aliased",
    "synchronizations",
    "event_waits",
    "device_time_ns",
    "wait_time_ns",
)
#: The pool's counters reported for the whole run.
POOL_COUNTERS = TIMED_POOL_COUNTERS + ("pre_expansions", "trimmed_bytes")
#: What --deterministic sets in the environment (before CUDA starts): cuBLAS without split reductions.
DETERMINISTIC_ENVIRONMENT = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}

#: What each mode sets in the environment before torch is imported (None: removed).
MODE_ENVIRONMENT = {
    "vrampool": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_NO_CUDA_MEMORY_CACHING": None, "VRAMPOOL_CONF": None},
    "vrampool-advised": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_NO_CUDA_MEMORY_CACHING": None},
    "pytorch": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_NO_CUDA_MEMORY_CACHING": None},
    "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_NO_CUDA_MEMORY_CACHING": None},
    "cudamallocasync": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync", "PYTORCH_NO_CUDA_MEMORY_CACHING": None},
    "nocache": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def mode_changes(mode: str, conf: str | None) -> dict:
    """The variables `mode` sets (None: removes), VRAMPOOL_CONF = conf for vrampool-advised."""
    changes = dict(MODE_ENVIRONMENT[mode])
    if mode == "vrampool-advised":
        changes["VRAMPOOL_CONF"] = conf
    return changes


def apply_environment(env: dict, mode: str, conf: str | None) -> dict:
    """`env` with the variables of `mode` set or removed."""
    env = dict(env)
    for name, value in mode_changes(mode, conf).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def device_conf(conf: str) -> str:
    """A config string for the GPU: a `backend=` naming a device without a GPU (sim, host: what trace replays
    use) is dropped, so the pool runs on CUDA virtual memory."""
    items = [item.strip() for item in conf.split(",") if item.strip()]
    kept = [item for item in items if item.replace(" ", "") not in ("backend=sim", "backend=host")]
    if len(kept) != len(items):
        log(f"note: dropped the simulated backend from the advised config `{conf}`")
    return ",".join(kept)


# ----------------------------------------------------------------------------------------------------------
# One run, in this process.


# Called where the timed part of a run starts (set by `run_here` for vrampool modes: it reads the pool's
# counters, so that the work the pool did while timed is reported apart from the warm-up's).
TIMED_START_HOOKS: list = []


def timed_start() -> float:
    """Marks the start of the timed part of a run; returns the time it starts at."""
    for hook in TIMED_START_HOOKS:
        hook()
    return time.perf_counter()


def timed_training(torch, step, inputs: list) -> dict:
    """Runs `step(*inputs[0])` as the untimed warm-up step, then times `step` on each of the other inputs."""
    warmup_loss = step(*inputs[0]).item()
    torch.cuda.synchronize()
    start = timed_start()
    losses = [step(*args) for args in inputs[1:]]
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "timed_steps": len(inputs) - 1,
        "warmup_steps": 1,
        "warmup_loss": warmup_loss,
        "losses": [loss.item() for loss in losses],
    }


def resnet_train_fixed(torch, seed: int) -> dict:
    import torchvision

    steps, batch = 8, 64
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None).cuda().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def step():
        images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
        labels = torch.randint(0, 1000, (batch,), device="cuda", generator=generator)
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return timed_training(torch, step, [()] * (steps + 1))


def gpt2_small(torch, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    return config, GPT2LMHeadModel(config)


def language_model_step(torch, model, optimizer, vocab_size: int, seed: int):
    """One training step of a causal language model on random tokens of a given batch and length, under bf16
    autocast; returns the loss. The tokens come from a CUDA generator seeded with `seed`."""
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def step(batch, length):
        tokens = torch.randint(0, vocab_size, (batch, length), device="cuda", generator=generator)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def gpt_train_varlen(torch, seed: int) -> dict:
    steps = 20
    config, model = gpt2_small(torch, seed)
    model = model.cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    shapes = [(rng.randint(4, 32), rng.randint(64, 1024)) for _ in range(steps + 1)]
    step = language_model_step(torch, model, optimizer, config.vocab_size, seed)
    return {**timed_training(torch, step, shapes), "shapes": shapes[1:]}


def gpt_serve(torch, seed: int) -> dict:
    requests = 12
    config, model = gpt2_small(torch, seed)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    rng = random.Random(seed)
    plan = [(rng.choice([1, 2, 4, 8]), rng.randint(16, 512), rng.randint(32, 128)) for _ in range(requests)]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    outputs = []
    torch.cuda.synchronize()
    start = timed_start()
    with torch.inference_mode():
        for batch, prompt, new_tokens in plan:
            tokens = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda", generator=generator)
            out = model.generate(
                input_ids=tokens,
                attention_mask=torch.ones_like(tokens),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                use_cache=True,
                pad_token_id=config.eos_token_id,
            )
            outputs.append(out[:, prompt:])
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    digest = hashlib.sha256()
    for out in outputs:
        digest.update(str(out.cpu().tolist()).encode())
    return {
        "wall_s": wall,
        "timed_steps": requests,
        "warmup_steps": 0,
        "requests": plan,
        "generated_tokens": [int(out.numel()) for out in outputs],
        "tokens_sha256": digest.hexdigest(),
    }


def vit_train_amp(torch, seed: int) -> dict:
    import timm

    steps, batch = 6, 64
    torch.manual_seed(seed)
    model = timm.create_model("vit_base_patch16_224", num_classes=1000).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
    labels = torch.randint(0, 1000, (batch,), device="cuda", generator=generator)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return timed_training(torch, step, [()] * (steps + 1))


def llama_train_ckpt_varlen(torch, seed: int) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    steps = 12
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).cuda().train()
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    shapes = [(rng.choice([2, 4, 8]), rng.randint(128, 2048)) for _ in range(steps + 1)]
    step = language_model_step(torch, model, optimizer, config.vocab_size, seed)
    return {**timed_training(torch, step, shapes), "shapes": shapes[1:]}


def timed_serving(torch, plan: list, serve) -> dict:
    """Times `serve(request)` on every request of `plan` under inference_mode (no warm-up); each returns a
    one-element tensor, and the digest of all of them says whether two runs computed the same."""
    sums = []
    torch.cuda.synchronize()
    start = timed_start()
    with torch.inference_mode():
        for request in plan:
            sums.append(serve(request))
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    digest = hashlib.sha256(str([float(value) for value in torch.stack(sums).cpu().tolist()]).encode())
    return {
        "wall_s": wall,
        "timed_steps": len(plan),
        "warmup_steps": 0,
        "requests": plan,
        "outputs_sha256": digest.hexdigest(),
    }


def bert_serve_dynbatch(torch, seed: int) -> dict:
    from transformers import BertConfig, BertModel

    requests = 150
    torch.manual_seed(seed)
    model = BertModel(BertConfig()).cuda().eval().half()
    rng = random.Random(seed)
    plan = [(rng.choice([1, 2, 4, 8, 16, 32, 64]), rng.randint(16, 512)) for _ in range(requests)]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def serve(request):
        batch, length = request
        tokens = torch.randint(0, 30522, (batch, length), device="cuda", generator=generator)
        return model(input_ids=tokens).last_hidden_state.float().sum()

    return timed_serving(torch, plan, serve)


def resnet_infer(torch, seed: int) -> dict:
    import torchvision

    requests = 40
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None).cuda().eval()
    rng = random.Random(seed)
    plan = [rng.choice([1, 8, 16, 32, 64]) for _ in range(requests)]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def serve(batch):
        images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
        return model(images).float().sum()

    return timed_serving(torch, plan, serve)


def diffusion_unet(torch):
    """A diffusion U-Net on latents of 4 channels: four levels of 128, 256, 512 and 512 channels, a residual
    block with the timestep's embedding per level on the way down and up (skip connections between them),
    self-attention at the two lowest levels and in the middle."""
    import math

    nn = torch.nn
    functional = torch.nn.functional

    class ResBlock(nn.Module):
        def __init__(self, cin, cout, tdim):
            super().__init__()
            self.norm1 = nn.GroupNorm(32, cin)
            self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
            self.time = nn.Linear(tdim, cout)
            self.norm2 = nn.GroupNorm(32, cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.conv1(functional.silu(self.norm1(x)))
            h = h + self.time(t)[:, :, None, None]
            h = self.conv2(functional.silu(self.norm2(h)))
            return h + self.skip(x)

    class Attention(nn.Module):
        def __init__(self, channels, heads=8):
            super().__init__()
            self.heads = heads
            self.norm = nn.GroupNorm(32, channels)
            self.qkv = nn.Conv2d(channels, 3 * channels, 1)
            self.out = nn.Conv2d(channels, channels, 1)

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
            y = functional.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
            return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))

    class UNet(nn.Module):
        def __init__(self, widths=(128, 256, 512, 512), attend=(False, False, True, True), tdim=512):
            super().__init__()
            self.time = nn.Sequential(nn.Linear(128, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inp = nn.Conv2d(4, widths[0], 3, padding=1)
            self.down, self.down_attn, self.downsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            cin = widths[0]
            for level, width in enumerate(widths):
                self.down.append(ResBlock(cin, width, tdim))
                self.down_attn.append(Attention(width) if attend[level] else nn.Identity())
                last = level == len(widths) - 1
                self.downsample.append(nn.Identity() if last else nn.Conv2d(width, width, 3, stride=2, padding=1))
                cin = width
            self.mid = ResBlock(cin, cin, tdim)
            self.mid_attn = Attention(cin)
            self.up, self.up_attn, self.upsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            for level in reversed(range(len(widths))):
                width = widths[level]
                self.up.append(ResBlock(cin + width, width, tdim))
                self.up_attn.append(Attention(width) if attend[level] else nn.Identity())
                self.upsample.append(nn.Conv2d(width, width, 3, padding=1) if level > 0 else nn.Identity())
                cin = width
            self.out = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 4, 3, padding=1))

        def forward(self, x, t):
            freqs = torch.exp(-math.log(10000.0) * torch.arange(64, device=x.device) / 64)
            angles = t.float()[:, None] * freqs[None]
            emb = self.time(torch.cat([angles.sin(), angles.cos()], dim=1))
            h = self.inp(x)
            skips = []
            for block, attention, down in zip(self.down, self.down_attn, self.downsample):
                h = attention(block(h, emb))
                skips.append(h)
                h = down(h)
            h = self.mid_attn(self.mid(h, emb))
            for block, attention, up in zip(self.up, self.up_attn, self.upsample):
                h = attention(block(torch.cat([h, skips.pop()], dim=1), emb))
                if not isinstance(up, nn.Identity):
                    h = up(functional.interpolate(h, scale_factor=2.0, mode="nearest"))
            return self.out(h)

    return UNet()


def unet_train_randres(torch, seed: int) -> dict:
    steps, batch = 12, 16
    torch.manual_seed(seed)
    model = diffusion_unet(torch).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    sizes = [rng.randrange(32, 97, 8) for _ in range(steps + 1)]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def step(size):
        latents = torch.randn(batch, 4, size, size, device="cuda", generator=generator)
        noise = torch.randn(batch, 4, size, size, device="cuda", generator=generator)
        t = torch.randint(0, 1000, (batch,), device="cuda", generator=generator)
        alpha = (1 - t.float() / 1000)[:, None, None, None]
        noisy = alpha.sqrt() * latents + (1 - alpha).sqrt() * noise
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(noisy, t).float(), noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return {**timed_training(torch, step, [(size,) for size in sizes]), "shapes": sizes[1:]}


def resnet_bert_mixed(torch, seed: int) -> dict:
    import torchvision
    from transformers import BertConfig, BertModel

    rounds, batch, per_round = 10, 32, 4
    torch.manual_seed(seed)
    resnet = torchvision.models.resnet50(weights=None).cuda().train()
    optimizer = torch.optim.SGD(resnet.parameters(), lr=0.1, momentum=0.9)
    bert = BertModel(BertConfig()).cuda().eval().half()
    rng = random.Random(seed)
    plan = [
        [(rng.choice([1, 2, 4, 8, 16, 32]), rng.randint(16, 384)) for _ in range(per_round)] for _ in range(rounds + 1)
    ]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)

    def round_of(requests):
        images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
        labels = torch.randint(0, 1000, (batch,), device="cuda", generator=generator)
        loss = torch.nn.functional.cross_entropy(resnet(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.inference_mode():
            for size, length in requests:
                tokens = torch.randint(0, 30522, (size, length), device="cuda", generator=generator)
                bert(input_ids=tokens).last_hidden_state.float().sum()
        return loss.detach()

    return {**timed_training(torch, round_of, [(requests,) for requests in plan]), "requests": plan[1:]}


def prefetch_two_streams(torch, seed: int) -> dict:
    import torchvision

    steps, batch = 12, 64
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None).cuda().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    host = torch.Generator().manual_seed(seed)
    raw_batches = [
        torch.randint(0, 256, (batch, 3, 256, 256), dtype=torch.uint8, generator=host).pin_memory() for _ in range(2)
    ]
    raw_labels = torch.randint(0, 1000, (steps + 1, batch), generator=host).pin_memory()
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    rng = random.Random(seed)
    crops = [(rng.randint(0, 32), rng.randint(0, 32)) for _ in range(steps + 1)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())

    def prepare(index):
        with torch.cuda.stream(side):
            raw = raw_batches[index % 2].to("cuda", non_blocking=True)
            top, left = crops[index]
            images = ((raw.float() - mean) / std)[:, :, top:top + 224, left:left + 224].contiguous()
            labels = raw_labels[index].to("cuda", non_blocking=True)
        return images, labels

    ready = [prepare(0)]

    def step(index):
        main = torch.cuda.current_stream()
        main.wait_stream(side)
        images, labels = ready.pop()
        images.record_stream(main)
        labels.record_stream(main)
        if index < steps:
            ready.append(prepare(index + 1))
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return timed_training(torch, step, [(index,) for index in range(steps + 1)])


def mixture_of_experts(torch, vocab: int, width=1024, layers=4, heads=8, experts=8, hidden=2816, top_k=2):
    """A decoder whose feed-forward is a mixture of experts with top-k routing: each expert's tokens are
    gathered, computed and added back, so the sizes of its tensors follow the router. Called with
    `input_ids` and `labels`, it returns an object whose `loss` is the next-token cross-entropy."""
    import types

    nn = torch.nn
    functional = torch.nn.functional

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(width, experts, bias=False)
            self.w1 = nn.Parameter(torch.randn(experts, width, hidden) * width**-0.5)
            self.w2 = nn.Parameter(torch.randn(experts, hidden, width) * hidden**-0.5)

        def forward(self, x):
            weights, chosen = self.router(x).float().softmax(dim=-1).topk(top_k, dim=-1)
            out = torch.zeros_like(x)
            for expert in range(experts):
                token, slot = (chosen == expert).nonzero(as_tuple=True)
                if token.numel() == 0:
                    continue
                h = functional.gelu(x[token] @ self.w1[expert]) @ self.w2[expert]
                out.index_add_(0, token, (h * weights[token, slot].unsqueeze(1)).to(out.dtype))
            return out

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.norm2 = nn.LayerNorm(width)
            self.moe = Experts()

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, n, width))
            return x + self.moe(self.norm2(x).reshape(b * n, width)).view(b, n, width)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, input_ids, labels):
            x = self.embed(input_ids)
            for layer in self.layers:
                x = layer(x)
            logits = self.head(self.norm(x))[:, :-1]
            loss = functional.cross_entropy(logits.reshape(-1, vocab).float(), labels[:, 1:].reshape(-1))
            return types.SimpleNamespace(loss=loss)

    return Decoder()


def moe_train_routing(torch, seed: int) -> dict:
    steps, vocab = 12, 32000
    torch.manual_seed(seed)
    model = mixture_of_experts(torch, vocab).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    shapes = [(rng.choice([4, 8]), rng.randint(256, 1024)) for _ in range(steps + 1)]
    step = language_model_step(torch, model, optimizer, vocab, seed)
    return {**timed_training(torch, step, shapes), "shapes": shapes[1:]}


RUNNERS = {
    "resnet_train_fixed": resnet_train_fixed,
    "gpt_train_varlen": gpt_train_varlen,
    "gpt_serve": gpt_serve,
    "vit_train_amp": vit_train_amp,
    "llama_train_ckpt_varlen": llama_train_ckpt_varlen,
    "bert_serve_dynbatch": bert_serve_dynbatch,
    "resnet_infer": resnet_infer,
    "unet_train_randres": unet_train_randres,
    "resnet_bert_mixed": resnet_bert_mixed,
    "prefetch_two_streams": prefetch_two_streams,
    "moe_train_routing": moe_train_routing,
}


def import_vrampool():
    """The installed vrampool package (`pip install .`), else the module of this repository."""
    try:
        import vrampool
    except ImportError:
        sys.path.insert(0, str(REPO / "python"))
        import vrampool
    return vrampool


def make_deterministic(torch) -> None:
    """PyTorch's deterministic kernels only: an op without one fails the run instead of computing differently
    from one run to the next. Attention takes the math kernel (the fused ones accumulate in a varying order)."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_math_sdp(True)


def run_here(
    workload: str,
    mode: str,
    conf: str | None,
    seed: int,
    lib: str | None,
    deterministic: bool = False,
    snapshot: str | None = None,
) -> dict:
    """Runs `workload` under `mode` in this process (the environment must be set before torch is imported);
    with `snapshot`, records the memory history from the start and writes the snapshot there (gzipped pickle,
    PyTorch's format: what `vrampool replay`, `compare` and `advise` read)."""
    if deterministic:
        os.environ.update(DETERMINISTIC_ENVIRONMENT)
    for name, value in mode_changes(mode, conf).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    vrampool = None
    if mode.startswith("vrampool"):
        vrampool = import_vrampool()

        vrampool.install(conf=conf, path=lib)
        at_timed_start: dict = {}
        TIMED_START_HOOKS.append(lambda: at_timed_start.update(vrampool.stats(0)["stats"]))
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible to PyTorch")
    torch.cuda.set_device(0)
    if deterministic:
        make_deterministic(torch)
    if snapshot:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    free, total = torch.cuda.mem_get_info()
    result = {"workload": workload, "mode": mode, "seed": seed, "ok": True, "deterministic": deterministic}
    result.update(RUNNERS[workload](torch, seed))
    torch.cuda.synchronize()
    free_end, _ = torch.cuda.mem_get_info()
    result["driver_used_bytes_start"] = total - free
    result["driver_used_bytes_end"] = total - free_end
    result["device_total_bytes"] = total
    if vrampool is not None:
        pool = vrampool.stats(0)
        stats = pool["stats"]
        result["peak_reserved_bytes"] = stats["reserved_bytes"]["peak"]
        result["peak_allocated_bytes"] = stats["allocated_bytes"]["peak"]
        result["allocated_is_requested"] = True
        result["vrampool"] = {
            "config": pool["config"],
            "backend": pool["backend"],
            "utilization": pool["utilization"],
            "failed_allocations": pool["failed_allocations"],
            "last_failure": pool["last_failure"],
            **{key: stats[key] for key in POOL_COUNTERS if key in stats},
            # What the pool did while the steps were timed.
            "timed": {
                key: stats[key] - at_timed_start[key]
                for key in TIMED_POOL_COUNTERS
                if key in stats and key in at_timed_start
            },
        }
    else:
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        result["allocated_is_requested"] = False
    result["torch"] = torch.__version__
    result["gpu"] = torch.cuda.get_device_name(0)
    if snapshot:
        import gzip
        import pickle

        with gzip.open(snapshot, "wb") as out:
            pickle.dump(torch.cuda.memory._snapshot(), out)
        torch.cuda.memory._record_memory_history(enabled=None)
        result["snapshot"] = snapshot
    return result


# ----------------------------------------------------------------------------------------------------------
# The driver.


def run_in_child(
    workload: str,
    mode: str,
    conf: str | None,
    seed: int,
    lib: str | None,
    timeout: float,
    deterministic: bool = False,
) -> dict:
    """One run in a fresh process; its JSON line, or a record of the failure."""
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "run", "--workload", workload, "--mode", mode]
    command += ["--seed", str(seed)]
    if deterministic:
        command += ["--deterministic"]
    if conf is not None:
        command += ["--conf", conf]
    if lib is not None:
        command += ["--lib", lib]
    env = apply_environment(dict(os.environ), mode, conf)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        stderr = err.stderr or ""
        tail = (stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr)[-3000:]
        return {
            "workload": workload,
            "mode": mode,
            "ok": False,
            "error": f"timed out after {timeout:.0f} s",
            "stderr_tail": tail,
        }
    process_s = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {
            "workload": workload,
            "mode": mode,
            "ok": False,
            "error": f"exit status {done.returncode}",
            "stderr_tail": done.stderr[-3000:],
        }
    record = json.loads(lines[-1])
    record["process_s"] = process_s
    return record


def plan_runs(workloads, modes, reps: int, extra: int, advised: set, warmup: int) -> list:
    """The runs of a drive, in order, as (workload, mode, rep, role). First `warmup` untimed runs of each
    workload (role "warmup", left out of every figure: the first process of a call ran slowest on the GPU hosts,
    whichever mode it was); then `reps` rounds of every mode, each round starting one mode later than the one
    before, so that no mode always runs first (role "measure"); then `extra` more runs of PyTorch's default
    for its own spread (role "spread"). vrampool-advised runs only for the workloads in `advised`."""
    modes = list(modes)
    plan = []
    for workload in workloads:
        for index in range(warmup):
            plan.append((workload, modes[0], -1 - index, "warmup"))
    for rep in range(reps):
        shift = rep % len(modes) if modes else 0
        for workload in workloads:
            for mode in modes[shift:] + modes[:shift]:
                if mode == "vrampool-advised" and workload not in advised:
                    continue
                plan.append((workload, mode, rep, "measure"))
    for more in range(extra):
        for workload in workloads:
            if "pytorch" in modes:
                plan.append((workload, "pytorch", reps + more, "spread"))
    return plan


def drive(args) -> None:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    earlier = read_runs(out) if (out / "runs.jsonl").exists() else []
    if earlier and kernels_of(earlier) != args.deterministic:
        raise SystemExit(f"{out}/runs.jsonl holds runs {'without' if args.deterministic else 'with'} "
                         "--deterministic: give each kind its own --out")
    advised = {workload: device_conf(conf) for workload, conf in (args.advised or [])}
    if args.advised_conf:
        for workload in args.workloads:
            advised.setdefault(workload, device_conf(args.advised_conf))
    plan = plan_runs(args.workloads, args.modes, args.reps, args.extra, set(advised), args.warmup)
    skipped = [w for w in args.workloads if "vrampool-advised" in args.modes and w not in advised]
    if skipped:
        log(f"note: vrampool-advised is skipped for {', '.join(skipped)}: no --advised config was given")
    log(f"{len(plan)} runs; results go to {out}/runs.jsonl")
    started = time.perf_counter()
    with open(out / "runs.jsonl", "a", encoding="utf-8") as runs:
        for index, (workload, mode, rep, role) in enumerate(plan, 1):
            conf = advised.get(workload) if mode == "vrampool-advised" else None
            record = run_in_child(workload, mode, conf, args.seed, args.lib, args.timeout, args.deterministic)
            record.update({"rep": rep, "role": role, "conf": conf, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
            runs.write(json.dumps(record) + "\n")
            runs.flush()
            elapsed = time.perf_counter() - started
            outcome = f"{record['wall_s']:.3f} s" if record.get("ok") else f"FAILED ({record.get('error')})"
            name = "warm-up" if role == "warmup" else f"run {rep + 1}"
            log(f"[{index}/{len(plan)}] {workload} {mode} {name}: {outcome}  (elapsed {elapsed:.0f} s)")
            if not record.get("ok"):
                log(record.get("stderr_tail", "")[-1500:])
    report(out)


def read_runs(out: pathlib.Path) -> list[dict]:
    path = out / "runs.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `drive` first")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def max_loss_difference(losses: list[float], reference: list[float]) -> float | None:
    if not losses or not reference or len(losses) != len(reference):
        return None
    return max(abs(a - b) for a, b in zip(losses, reference))


def own_spread(runs: list[dict]) -> float | None:
    """The largest per-step loss difference between any two of `runs`: how far a mode's runs move by
    themselves (nondeterministic kernels)."""
    losses = [r.get("losses") for r in runs if r.get("losses")]
    diffs = [max_loss_difference(a, b) for i, a in enumerate(losses) for b in losses[i + 1:]]
    return max((d for d in diffs if d is not None), default=None)


def median_losses(runs: list[dict]) -> list[float] | None:
    """Per step, the median loss over `runs` (the centre of PyTorch's own runs)."""
    losses = [r.get("losses") for r in runs if r.get("losses")]
    if not losses or any(len(l) != len(losses[0]) for l in losses):
        return None
    return [statistics.median(step) for step in zip(*losses)]


def interpolated_ratios(runs: list[dict], workload: str, mode: str) -> list[float]:
    """Each timed run of `mode` against PyTorch's default at the same moment: its wall time over the time PyTorch's
    default would have taken then, interpolated (by position in the call) between the PyTorch runs just before
    and just after it (the nearer one where there is only one side). `runs` are in the order they ran. A host
    that slows down or speeds up through a call moves the medians of modes that ran at different moments; it
    moves these ratios only by how far the change departs from a straight line between neighbouring runs."""
    order = [r for r in runs if r["workload"] == workload and r.get("role") != "warmup"]
    reference = [(i, r["wall_s"]) for i, r in enumerate(order)
                 if r["mode"] == "pytorch" and r.get("ok") and r.get("wall_s")]
    ratios = []
    for i, r in enumerate(order):
        if r["mode"] != mode or not r.get("ok") or not r.get("wall_s") or r.get("role", "measure") != "measure":
            continue
        before = [(j, t) for j, t in reference if j < i]
        after = [(j, t) for j, t in reference if j > i]
        if before and after:
            (j0, t0), (j1, t1) = before[-1], after[0]
            expected = t0 + (t1 - t0) * (i - j0) / (j1 - j0)
        elif before or after:
            expected = (before or after)[-1 if before else 0][1]
        else:
            continue
        ratios.append(r["wall_s"] / expected)
    return ratios


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (workload, mode) in the runs (warm-up runs left out)."""
    runs = [r for r in runs if r.get("role") != "warmup"]
    rows = []
    for workload in ALL_WORKLOADS:
        ok_pytorch = [r for r in runs if r["workload"] == workload and r["mode"] == "pytorch" and r.get("ok")]
        reference = ok_pytorch[0] if ok_pytorch else None
        pytorch_spread = own_spread(ok_pytorch)
        pytorch_centre = median_losses(ok_pytorch)
        pytorch_wall = median([r["wall_s"] for r in ok_pytorch if r.get("role") == "measure"])
        for mode in MODES:
            mine = [r for r in runs if r["workload"] == workload and r["mode"] == mode]
            if not mine:
                continue
            ok = [r for r in mine if r.get("ok")]
            timed = [r for r in ok if r.get("role", "measure") == "measure"]
            row = {
                "workload": workload,
                "mode": mode,
                "runs": len(mine),
                "runs_ok": len(ok),
                "wall_s_median": median([r["wall_s"] for r in timed]),
                "wall_s_min": min((r["wall_s"] for r in timed), default=None),
                "wall_s_max": max((r["wall_s"] for r in timed), default=None),
                "peak_reserved_bytes": median([r.get("peak_reserved_bytes") for r in ok]),
                "peak_allocated_bytes": median([r.get("peak_allocated_bytes") for r in ok]),
                "driver_used_bytes_end": median([r.get("driver_used_bytes_end") for r in ok]),
                "driver_used_bytes_start": median([r.get("driver_used_bytes_start") for r in ok]),
                "conf": next((r.get("vrampool", {}).get("config") for r in ok if r.get("vrampool")), None),
                "errors": sorted({r.get("error", "") for r in mine if not r.get("ok")}),
            }
            if row["peak_reserved_bytes"] and row["peak_allocated_bytes"]:
                row["utilization"] = row["peak_allocated_bytes"] / row["peak_reserved_bytes"]
            if pytorch_wall and row["wall_s_median"]:
                row["wall_vs_pytorch"] = row["wall_s_median"] / pytorch_wall
            if mode != "pytorch":
                row["wall_vs_pytorch_interpolated"] = median(interpolated_ratios(runs, workload, mode))
            if reference is not None and ok:
                others = [r for r in ok if r is not reference]
                if workload in TRAINING:
                    diffs = [max_loss_difference(r.get("losses"), reference.get("losses")) for r in others]
                    row["max_loss_difference_vs_pytorch_run_1"] = max((d for d in diffs if d is not None), default=None)
                    row["pytorch_loss_spread"] = pytorch_spread
                    row["pytorch_runs"] = len(ok_pytorch)
                    if mode != "pytorch" and pytorch_centre is not None:
                        centre = [max_loss_difference(r.get("losses"), pytorch_centre) for r in ok]
                        row["max_loss_difference_vs_pytorch_median"] = max(
                            (d for d in centre if d is not None), default=None
                        )
                else:
                    row["token_counts_match_pytorch"] = all(
                        r.get("generated_tokens") == reference.get("generated_tokens") for r in ok
                    )
                    row["token_ids_match_pytorch"] = sum(
                        r.get("tokens_sha256") == reference.get("tokens_sha256") for r in others
                    )
                    row["token_ids_compared"] = len(others)
            rows.append(row)
    return rows


def pool_work_line(run: dict) -> str:
    """One run's device work while timed, from the pool's counters, as a list item."""
    timed = run["vrampool"]["timed"]
    ms = lambda key: timed.get(key, 0) / 1e6  # noqa: E731
    waits = timed.get("synchronizations", 0) + timed.get("event_waits", 0)
    return (
        f"- {run['workload']} {run['mode']} run {run.get('rep', '?')} ({run['wall_s']:.3f} s): "
        f"{timed.get('backend_calls', 0)} memory calls, {timed.get('growths', 0)} growths, "
        f"{timed.get('chunks_moved', 0)} chunks moved, {timed.get('chunks_aliased', 0)} aliased, {waits} waits "
        f"({timed.get('synchronizations', 0)} for the whole device); {ms('device_time_ns'):.1f} ms in device work, "
        f"{ms('wait_time_ns'):.1f} ms of it waiting"
    )


def mib(value) -> str:
    return "-" if value is None else f"{value / MIB:,.0f}"


def kernels_of(runs: list[dict]) -> bool:
    """Whether `runs` ran with deterministic kernels; refuses a mix (their losses and times do not compare)."""
    kinds = {bool(r.get("deterministic")) for r in runs if r.get("ok")}
    if len(kinds) > 1:
        raise SystemExit("runs.jsonl mixes runs with and without --deterministic: give each kind its own --out")
    return kinds == {True}


def report(out: pathlib.Path) -> None:
    runs = read_runs(out)
    deterministic = kernels_of(runs)
    rows = summarize(runs)
    meta = next((r for r in runs if r.get("ok")), {})
    (out / "pytorch-e2e.json").write_text(json.dumps({"rows": rows, "runs": runs}, indent=2), encoding="utf-8")
    lines = [
        "# PyTorch workloads under each allocator",
        "",
        f"GPU: {meta.get('gpu', '?')}; PyTorch {meta.get('torch', '?')}. Each run is a fresh process. Wall time: the "
        "timed steps only (training: after 1 warm-up step that is not timed; generation: all 12 requests, no "
        "warm-up), median of the runs (min-max). Peaks: vrampool's own stats for vrampool modes (allocated = "
        "requested bytes); `torch.cuda.max_memory_reserved/allocated` for PyTorch modes (allocated = sizes "
        "rounded to 512 B). vs pytorch: the ratio of the medians; in brackets, the median over the mode's runs of "
        "its wall time over PyTorch default's at the same moment, interpolated between the PyTorch runs before "
        "and after it (a host that slows down or speeds up steadily through the call moves the medians of modes "
        "that ran at different moments, not these ratios). Driver used: `total - free` of "
        "`torch.cuda.mem_get_info()` at the end of the run (includes the CUDA context)."
        + (
            " **Deterministic kernels** (`--deterministic`): a check that the losses are the same bit for bit; "
            "the times are those of the deterministic kernels, comparable between these runs only."
            if deterministic
            else ""
        ),
        "",
        "| workload | mode | runs ok | wall s median (min-max) | vs pytorch (interpolated) | peak reserved MiB | peak allocated MiB "
        "| utilization | driver used MiB (end) | agreement with PyTorch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        wall = "-"
        if row["wall_s_median"] is not None:
            wall = f"{row['wall_s_median']:.3f} ({row['wall_s_min']:.3f}-{row['wall_s_max']:.3f})"
        # Three places: with two, a ratio just over a bound of 1.02 would print as 1.02x, a miss read as met.
        versus = f"{row['wall_vs_pytorch']:.3f}x" if row.get("wall_vs_pytorch") else "-"
        if row.get("wall_vs_pytorch_interpolated"):
            versus += f" ({row['wall_vs_pytorch_interpolated']:.3f}x)"
        utilization = f"{row['utilization']:.3f}" if row.get("utilization") else "-"
        if row["workload"] in TRAINING:
            spread = row.get("pytorch_loss_spread")
            diff = row.get("max_loss_difference_vs_pytorch_median")
            if row["mode"] == "pytorch":
                agreement = "-" if spread is None else f"own spread {spread:.2e} ({row['pytorch_runs']} runs)"
            elif diff is None or spread is None:
                agreement = "-"
            else:
                verdict = "within" if diff <= spread else "OUTSIDE"
                agreement = f"{diff:.2e} from PyTorch's median: {verdict} its spread"
        elif "token_counts_match_pytorch" in row:
            counts = "token counts equal" if row["token_counts_match_pytorch"] else "TOKEN COUNTS DIFFER"
            agreement = f"{counts}; ids equal in {row['token_ids_match_pytorch']}/{row['token_ids_compared']}"
        else:
            agreement = "-"
        ok = f"{row['runs_ok']}/{row['runs']}" + (f" ({'; '.join(row['errors'])})" if row["errors"] else "")
        lines.append(
            f"| {row['workload']} | {row['mode']} | {ok} | {wall} | {versus} | {mib(row['peak_reserved_bytes'])} "
            f"| {mib(row['peak_allocated_bytes'])} | {utilization} | {mib(row['driver_used_bytes_end'])} | {agreement} |"
        )
    confs = [(row["workload"], row["mode"], row["conf"]) for row in rows if row.get("conf")]
    if confs:
        lines += ["", "vrampool configs:", ""]
        lines += [f"- {workload} {mode}: `{conf}`" for workload, mode, conf in confs]
    work = [pool_work_line(r) for r in runs if r.get("ok") and r.get("vrampool", {}).get("timed")]
    if work:
        lines += ["", "vrampool's device work while timed, run by run (time measured on the calling thread):", ""]
        lines += work
    lines += [
        "",
        "Losses (training): PyTorch default's own spread is the largest per-step difference between any two of "
        "its runs. Another mode agrees when none of its runs is further, at any step, from the per-step median "
        "of PyTorch's runs than that spread: such differences come from nondeterministic kernels, not from the "
        "allocator. Generation: generated token counts against PyTorch's first run, and how many runs produced "
        "the same token ids.",
    ]
    (out / "pytorch-e2e.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="one workload under one mode in this process; one JSON line out")
    run.add_argument("--workload", choices=ALL_WORKLOADS, required=True)
    run.add_argument("--mode", choices=MODES, required=True)
    run.add_argument("--conf", help="the config string for vrampool-advised")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--lib", help="libvrampool_c.so (default: $VRAMPOOL_LIB, else target/release/libvrampool_c.so)")
    run.add_argument("--deterministic", action="store_true", help="deterministic kernels only (see above)")
    run.add_argument("--snapshot", metavar="FILE",
                     help="record the memory history and write the snapshot to FILE (a gzipped pickle)")

    drive_cmd = commands.add_parser("drive", help="every (workload, mode), each run in its own process")
    drive_cmd.add_argument("--out", required=True, help="folder for runs.jsonl, pytorch-e2e.md and pytorch-e2e.json")
    drive_cmd.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS),
                           help=f"comma-separated, of {', '.join(ALL_WORKLOADS)} (default: the first six)")
    drive_cmd.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES),
                           help=f"comma-separated, of {', '.join(MODES)} (default: all)")
    drive_cmd.add_argument("--reps", type=int, default=3, help="runs of each (workload, mode) (default 3)")
    drive_cmd.add_argument("--extra", type=int, default=2,
                           help="further runs of PyTorch's default per workload, for its own loss spread (default 2)")
    drive_cmd.add_argument("--advised", nargs=2, action="append", metavar=("WORKLOAD", "CONF"),
                           help="the vrampool-advised config string of a workload (repeatable)")
    drive_cmd.add_argument("--advised-conf", help="one vrampool-advised config string for every workload")
    drive_cmd.add_argument("--warmup", type=int, default=1,
                           help="untimed runs of the first mode before the others, per workload (default 1)")
    drive_cmd.add_argument("--seed", type=int, default=0)
    drive_cmd.add_argument("--lib", help="libvrampool_c.so (default: $VRAMPOOL_LIB, else target/release/libvrampool_c.so)")
    drive_cmd.add_argument("--timeout", type=float, default=300.0, help="seconds per run (default 300)")
    drive_cmd.add_argument("--deterministic", action="store_true",
                           help="deterministic kernels only: losses must agree bit for bit (see above)")

    report_cmd = commands.add_parser("report", help="rewrite the table and JSON from OUT/runs.jsonl")
    report_cmd.add_argument("--out", required=True)

    args = parser.parse_args(argv)
    if args.command == "drive":
        for workload in args.workloads:
            if workload not in ALL_WORKLOADS:
                parser.error(f"unknown workload {workload!r}; choose from {', '.join(ALL_WORKLOADS)}")
        for mode in args.modes:
            if mode not in MODES:
                parser.error(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        for workload, _ in args.advised or []:
            if workload not in ALL_WORKLOADS:
                parser.error(f"--advised: unknown workload {workload!r}")
    if args.command == "run" and args.mode == "vrampool-advised" and not args.conf:
        parser.error("--mode vrampool-advised needs --conf")
    return args


def main(argv=None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        conf = device_conf(args.conf) if args.conf else None
        try:
            result = run_here(
                args.workload, args.mode, conf, args.seed, args.lib, args.deterministic, args.snapshot
            )
        except Exception as err:  # the driver reads the failure from stderr and the exit status
            log(f"{args.workload} under {args.mode} failed: {type(err).__name__}: {err}")
            raise
        print(json.dumps(result), flush=True)
    elif args.command == "drive":
        drive(args)
    else:
        report(pathlib.Path(args.out))


if __name__ == "__main__":
    main()
