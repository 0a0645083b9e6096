"""Real PyTorch workloads for the genesis-mem allocation corpus and the live allocator benchmark.

Each workload is a generator `fn(dev, rng, scale)` that builds a randomly initialised model (no
weights are downloaded), runs it, and yields one float per step (the loss, or a checksum of an
inference step's output) so that runs under different allocators can be compared step for step.
The shapes a workload uses (batch, sequence length, resolution) come from `rng`, a seeded
`random.Random`, so every run of one workload sees the same sequence of shapes.

They differ in the ways that fragment memory: variable sequence length and batch, activation
checkpointing, gradient accumulation, prefill and decode with a growing KV cache, sampling and
beam search, variable resolution, fp32 and bf16, train/eval interleaving, a side stream,
mixture-of-experts routing (how many tokens each expert gets changes every step), two models
trained in turn (a GAN). The workloads after the `UNSEEN` marker below were added after the
allocator's policy was fixed (`corpus.py`'s `UNSEEN`), and those after the `FRESH` marker later
still, as a check on the policy of that time (`corpus.py`'s `FRESH`).
`scale` multiplies the step count (1.0 for the corpus; smaller for a smoke test).
"""

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def steps(n, scale):
    return max(2, int(round(n * scale)))


def autocast(enabled):
    if enabled:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _lm_batch(dev, rng, vocab, batches, lengths):
    b = rng.choice(batches)
    t = rng.choice(lengths)
    g = torch.Generator(device="cpu").manual_seed(rng.randrange(1 << 30))
    return torch.randint(0, vocab, (b, t), generator=g).to(dev)


def _train_lm(model, dev, rng, scale, *, vocab, batches, lengths, n, bf16, accum=1, lr=3e-4):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps(n, scale)):
        total = 0.0
        for _ in range(accum):
            ids = _lm_batch(dev, rng, vocab, batches, lengths)
            with autocast(bf16):
                loss = model(input_ids=ids, labels=ids).loss / accum
            loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield total


def _train_seq2seq(model, batch, *, n, bf16, lr=1e-4):
    """An encoder-decoder trained for `n` steps on `batch()`, the model's keyword inputs
    (with `labels`)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(n):
        inputs = batch()
        with autocast(bf16):
            loss = model(**inputs).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def _gpt2(n_layer, n_embd, n_head, vocab=32000, ctx=1024):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab,
                     n_positions=ctx, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def _llama(layers, hidden, heads, kv_heads, inter, vocab=32000, ctx=2048):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=ctx,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg)


# ---- LLM training -----------------------------------------------------------------------------

def gpt2_train_varlen_bf16(dev, rng, scale):
    m = _gpt2(8, 768, 12).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[4, 8, 12, 16],
                         lengths=[128, 256, 384, 512, 640, 768, 1024], n=24, bf16=True)


def gpt2_train_ckpt_bf16(dev, rng, scale):
    m = _gpt2(12, 768, 12).to(dev)
    m.gradient_checkpointing_enable()
    m.config.use_cache = False
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[8, 16, 24],
                         lengths=[256, 512, 768, 1024], n=20, bf16=True)


def gpt2_train_accum_fp32(dev, rng, scale):
    m = _gpt2(6, 512, 8).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[2, 4, 6, 8],
                         lengths=[64, 200, 333, 512, 700, 1024], n=12, bf16=False, accum=4)


def llama_gqa_train_varlen_bf16(dev, rng, scale):
    m = _llama(8, 1024, 16, 4, 2816).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[2, 4, 6, 8],
                         lengths=[256, 512, 1000, 1536, 2048], n=20, bf16=True)


def llama_gqa_train_ckpt_accum_bf16(dev, rng, scale):
    m = _llama(12, 1536, 12, 4, 4096).to(dev)
    m.gradient_checkpointing_enable()
    m.config.use_cache = False
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[1, 2, 4],
                         lengths=[512, 1024, 1777, 2048], n=10, bf16=True, accum=3)


def t5_train_varlen_bf16(dev, rng, scale):
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128,
                   dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    m = T5ForConditionalGeneration(cfg).to(dev)

    def batch():
        src = _lm_batch(dev, rng, 32128, [8, 16, 32], [64, 128, 256, 512])
        tgt = _lm_batch(dev, rng, 32128, [src.shape[0]], [16, 32, 64, 128])
        return {"input_ids": src, "labels": tgt}

    yield from _train_seq2seq(m, batch, n=steps(20, scale), bf16=True)


def gru_lm_train_varlen_fp32(dev, rng, scale):
    class GruLm(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16000, 512)
            self.rnn = nn.GRU(512, 1024, num_layers=2, batch_first=True)
            self.out = nn.Linear(1024, 16000)

        def forward(self, x):
            h, _ = self.rnn(self.emb(x))
            return self.out(h)

    m = GruLm().to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for _ in range(steps(20, scale)):
        ids = _lm_batch(dev, rng, 16000, [16, 32, 48, 64], [32, 64, 100, 128, 200])
        logits = m(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def gpt2_train_eval_interleave_bf16(dev, rng, scale):
    m = _gpt2(6, 768, 12).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    for step in range(steps(24, scale)):
        m.train()
        ids = _lm_batch(dev, rng, 32000, [8, 16], [256, 512, 1024])
        with autocast(True):
            loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        val = loss.item()
        if step % 4 == 3:
            m.eval()
            with torch.no_grad(), autocast(True):
                for _ in range(3):
                    ids = _lm_batch(dev, rng, 32000, [32, 64], [128, 512, 1024])
                    val += m(input_ids=ids, labels=ids).loss.item()
        yield val


# ---- LLM inference ----------------------------------------------------------------------------

def _generate(m, dev, rng, scale, *, n, batches, prompts, new_tokens, **kw):
    m.eval()
    out = []
    with torch.no_grad():
        for _ in range(steps(n, scale)):
            ids = _lm_batch(dev, rng, m.config.vocab_size, batches, prompts)
            nt = rng.choice(new_tokens)
            g = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=nt,
                           min_new_tokens=nt, pad_token_id=0, **kw)
            out.append(float(g.sum().item()))
            yield out[-1]


def gpt2_generate_sample_varbatch(dev, rng, scale):
    torch.manual_seed(rng.randrange(1 << 30))
    m = _gpt2(12, 768, 12, vocab=50257).to(dev)
    yield from _generate(m, dev, rng, scale, n=8, batches=[1, 3, 8, 16], prompts=[16, 64, 200],
                         new_tokens=[32, 64, 128], do_sample=True, top_k=50, top_p=0.95)


def llama_generate_beam_bf16(dev, rng, scale):
    m = _llama(8, 1024, 16, 4, 2816).to(dev, dtype=torch.bfloat16)
    yield from _generate(m, dev, rng, scale, n=6, batches=[1, 2, 4], prompts=[32, 128, 300],
                         new_tokens=[24, 48], num_beams=4, do_sample=False)


def llama_generate_greedy_varbatch_fp32(dev, rng, scale):
    m = _llama(6, 1024, 16, 4, 2816).to(dev)
    yield from _generate(m, dev, rng, scale, n=8, batches=[1, 4, 8, 16], prompts=[8, 100, 512],
                         new_tokens=[32, 96, 160], do_sample=False)


def llama_decode_manual_kvcat_bf16(dev, rng, scale):
    """A hand-written prefill + decode loop over the model's dynamic KV cache, which grows by
    one position (a concatenation) each token."""
    m = _llama(8, 2048, 16, 4, 5632).to(dev, dtype=torch.bfloat16)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(6, scale)):
            ids = _lm_batch(dev, rng, 32000, [1, 2, 4, 8], [64, 256, 700])
            out = m(input_ids=ids, use_cache=True)
            cache = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
            total = 0.0
            for _ in range(rng.choice([48, 96, 128])):
                out = m(input_ids=tok, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
                total += float(tok.sum().item())
            del out, cache
            yield total


# ---- encoders ---------------------------------------------------------------------------------

def _bert(layers=12, hidden=768):
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                     num_attention_heads=hidden // 64, intermediate_size=4 * hidden,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=4)
    return BertForSequenceClassification(cfg)


def bert_train_varbatch_varlen_bf16(dev, rng, scale):
    m = _bert().to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=2e-5)
    m.train()
    for _ in range(steps(24, scale)):
        ids = _lm_batch(dev, rng, 30522, [8, 16, 24, 32, 48], [32, 64, 128, 200, 256, 384, 512])
        labels = torch.randint(0, 4, (ids.shape[0],), device=dev)
        with autocast(True):
            loss = m(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def bert_infer_varbatch_fp32(dev, rng, scale):
    m = _bert(24, 1024).to(dev)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(30, scale)):
            ids = _lm_batch(dev, rng, 30522, [1, 7, 32, 64, 128], [16, 48, 128, 256, 512])
            yield float(m(input_ids=ids).logits.float().sum().item())


# ---- vision -----------------------------------------------------------------------------------

def _images(dev, rng, batches, sizes, channels_last=False):
    b, s = rng.choice(batches), rng.choice(sizes)
    g = torch.Generator(device="cpu").manual_seed(rng.randrange(1 << 30))
    x = torch.randn(b, 3, s, s, generator=g).to(dev)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _train_classifier(m, dev, rng, scale, *, n, batches, sizes, bf16, classes=1000,
                      opt=None, channels_last=False):
    opt = opt or torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    m.train()
    for _ in range(steps(n, scale)):
        x = _images(dev, rng, batches, sizes, channels_last)
        y = torch.randint(0, classes, (x.shape[0],), device=dev)
        with autocast(bf16):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def resnet50_train_varres_fp32(dev, rng, scale):
    import torchvision

    m = torchvision.models.resnet50(weights=None).to(dev)
    yield from _train_classifier(m, dev, rng, scale, n=12, batches=[16, 32, 48],
                                 sizes=[160, 192, 224, 256, 288], bf16=False)


def resnet18_infer_varbatch_bf16_cl(dev, rng, scale):
    import torchvision

    m = torchvision.models.resnet18(weights=None).to(dev, memory_format=torch.channels_last)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(30, scale)):
            x = _images(dev, rng, [1, 8, 64, 256], [224, 320], channels_last=True)
            with autocast(True):
                yield float(m(x).float().sum().item())


def vit_b16_train_bf16_varbatch(dev, rng, scale):
    import torchvision

    m = torchvision.models.vit_b_16(weights=None).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    yield from _train_classifier(m, dev, rng, scale, n=16, batches=[16, 32, 48, 64],
                                 sizes=[224], bf16=True, opt=opt)


def convnext_tiny_train_fp32(dev, rng, scale):
    import timm

    m = timm.create_model("convnext_tiny", pretrained=False, num_classes=100).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    yield from _train_classifier(m, dev, rng, scale, n=12, batches=[16, 32, 64],
                                 sizes=[160, 224], bf16=False, classes=100, opt=opt)


def efficientnet_b0_train_bf16_varres_cl(dev, rng, scale):
    import timm

    m = timm.create_model("efficientnet_b0", pretrained=False, num_classes=200)
    m = m.to(dev, memory_format=torch.channels_last)
    opt = torch.optim.RMSprop(m.parameters(), lr=1e-3)
    yield from _train_classifier(m, dev, rng, scale, n=16, batches=[32, 64, 96],
                                 sizes=[192, 224, 256, 300], bf16=True, classes=200, opt=opt,
                                 channels_last=True)


def deeplabv3_train_varres(dev, rng, scale):
    import torchvision

    m = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=True).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    m.train()
    for _ in range(steps(10, scale)):
        x = _images(dev, rng, [4, 8], [256, 320, 384, 448, 512])
        y = torch.randint(0, 21, (x.shape[0], x.shape[2], x.shape[3]), device=dev)
        with autocast(True):
            out = m(x)
            loss = F.cross_entropy(out["out"], y) + 0.5 * F.cross_entropy(out["aux"], y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def _train_detector(m, dev, rng, scale, *, n, lr, counts, heights, widths, max_boxes, margin,
                    box_min, box_span):
    """Detection training on random images of random sizes, each with 1 to `max_boxes` boxes
    of `box_min` to `box_min + box_span` pixels a side."""
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    m.train()
    for _ in range(steps(n, scale)):
        images, targets = [], []
        for _ in range(rng.choice(counts)):
            h, w = rng.choice(heights), rng.choice(widths)
            images.append(torch.rand(3, h, w, device=dev))
            k = rng.randint(1, max_boxes)
            x0 = torch.rand(k, device=dev) * (w - margin)
            y0 = torch.rand(k, device=dev) * (h - margin)
            bw = box_min + torch.rand(k, device=dev) * box_span
            bh = box_min + torch.rand(k, device=dev) * box_span
            boxes = torch.stack([x0, y0, x0 + bw, y0 + bh], 1)
            targets.append({"boxes": boxes, "labels": torch.randint(1, 11, (k,), device=dev)})
        losses = m(images, targets)
        loss = sum(losses.values())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def fasterrcnn_train_varres(dev, rng, scale):
    import torchvision

    m = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=11).to(dev)
    yield from _train_detector(m, dev, rng, scale, n=12, lr=0.005, counts=[2, 4, 6],
                               heights=[320, 480, 640, 800], widths=[320, 512, 640, 800],
                               max_boxes=12, margin=40, box_min=8, box_span=30)


class _UNet(nn.Module):
    """A diffusion-style UNet: residual blocks with a time embedding, self-attention at the two
    lowest resolutions, skip connections."""

    def __init__(self, ch=128, mult=(1, 2, 3, 4)):
        super().__init__()
        self.ch = ch
        self.temb = nn.Sequential(nn.Linear(ch, 4 * ch), nn.SiLU(), nn.Linear(4 * ch, 4 * ch))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        chans, c = [ch], ch
        for i, m in enumerate(mult):
            for _ in range(2):
                self.down.append(_Res(c, m * ch, 4 * ch, attn=i >= 2))
                c = m * ch
                chans.append(c)
            if i < len(mult) - 1:
                self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                chans.append(c)
        self.mid = _Res(c, c, 4 * ch, attn=True)
        for i, m in reversed(list(enumerate(mult))):
            for _ in range(3):
                self.up.append(_Res(c + chans.pop(), m * ch, 4 * ch, attn=i >= 2))
                c = m * ch
            if i > 0:
                self.up.append(nn.Upsample(scale_factor=2, mode="nearest"))
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x, t):
        half = self.ch // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
        e = t.float()[:, None] * freqs[None]
        temb = self.temb(torch.cat([e.sin(), e.cos()], 1))
        h = self.inp(x)
        hs = [h]
        for layer in self.down:
            h = layer(h, temb) if isinstance(layer, _Res) else layer(h)
            hs.append(h)
        h = self.mid(h, temb)
        for layer in self.up:
            if isinstance(layer, _Res):
                h = layer(torch.cat([h, hs.pop()], 1), temb)
            else:
                h = layer(h)
        return self.out(h)


class _Res(nn.Module):
    def __init__(self, cin, cout, tdim, attn):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.attn = nn.MultiheadAttention(cout, 4, batch_first=True) if attn else None
        self.na = nn.GroupNorm(32, cout) if attn else None

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(temb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h))) + self.skip(x)
        if self.attn is not None:
            b, c, hh, ww = h.shape
            q = self.na(h).flatten(2).transpose(1, 2)
            h = h + self.attn(q, q, q, need_weights=False)[0].transpose(1, 2).reshape(b, c, hh, ww)
        return h


def unet_diffusion_train_bf16_ema(dev, rng, scale):
    m = _UNet().to(dev)
    ema = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for _ in range(steps(14, scale)):
        x0 = _images(dev, rng, [8, 16, 32], [32, 64])
        t = torch.randint(0, 1000, (x0.shape[0],), device=dev)
        a = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None]
        noise = torch.randn_like(x0)
        xt = a * x0 + (1 - a * a).sqrt() * noise
        with autocast(True):
            loss = F.mse_loss(m(xt, t).float(), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in m.parameters()], 0.01)
        yield loss.item()


def resnet18_train_side_stream_prefetch(dev, rng, scale):
    """Training whose inputs are copied from pinned host memory on a side stream, one batch
    ahead, and handed to the main stream with `record_stream`."""
    import torchvision

    m = torchvision.models.resnet18(weights=None, num_classes=100).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    side = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)

    def host_batch():
        b, s = rng.choice([32, 64, 128]), rng.choice([128, 160, 224])
        g = torch.Generator().manual_seed(rng.randrange(1 << 30))
        return (torch.randn(b, 3, s, s, generator=g).pin_memory(),
                torch.randint(0, 100, (b,), generator=g).pin_memory())

    def prefetch(batch):
        with torch.cuda.stream(side):
            x = batch[0].to(dev, non_blocking=True)
            y = batch[1].to(dev, non_blocking=True)
            x = (x - x.mean()) / x.std()
        return x, y

    nxt = prefetch(host_batch())
    m.train()
    for _ in range(steps(16, scale)):
        main.wait_stream(side)
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        nxt = prefetch(host_batch())
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y
        yield loss.item()


# ---- UNSEEN: recorded after the allocator's policy was fixed (never tuned on) ---------------

def mobilenet_v3_train_varbatch_bf16_cl(dev, rng, scale):
    import torchvision

    m = torchvision.models.mobilenet_v3_large(weights=None, num_classes=100)
    m = m.to(dev, memory_format=torch.channels_last)
    yield from _train_classifier(m, dev, rng, scale, n=16, batches=[32, 64, 128, 192],
                                 sizes=[192, 224], bf16=True, classes=100, channels_last=True)


def swin_t_train_fp32_varbatch(dev, rng, scale):
    import torchvision

    m = torchvision.models.swin_t(weights=None, num_classes=100).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    yield from _train_classifier(m, dev, rng, scale, n=12, batches=[8, 16, 32, 48],
                                 sizes=[224], bf16=False, classes=100, opt=opt)


def densenet121_train_varres_bf16(dev, rng, scale):
    import torchvision

    m = torchvision.models.densenet121(weights=None, num_classes=100).to(dev)
    yield from _train_classifier(m, dev, rng, scale, n=12, batches=[16, 32, 64],
                                 sizes=[160, 224, 256], bf16=True, classes=100)


def retinanet_train_varres(dev, rng, scale):
    import torchvision

    m = torchvision.models.detection.retinanet_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=11).to(dev)
    yield from _train_detector(m, dev, rng, scale, n=10, lr=0.002, counts=[2, 3, 4],
                               heights=[384, 512, 640], widths=[384, 512, 640, 768],
                               max_boxes=10, margin=60, box_min=16, box_span=40)


def bert_mlm_train_accum_fp32(dev, rng, scale):
    """Masked-language-model training: the vocabulary logits (batch x length x 30522, fp32)
    are the largest blocks; gradients accumulate over two micro-batches."""
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(num_hidden_layers=8, hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    m = BertForMaskedLM(cfg).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=30522, batches=[4, 8, 16],
                         lengths=[128, 256, 384, 512], n=12, bf16=False, accum=2, lr=2e-5)


def opt_generate_sample_bf16(dev, rng, scale):
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(rng.randrange(1 << 30))
    cfg = OPTConfig(hidden_size=1024, num_hidden_layers=12, ffn_dim=4096,
                    num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048,
                    word_embed_proj_dim=1024, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    m = OPTForCausalLM(cfg).to(dev, dtype=torch.bfloat16)
    yield from _generate(m, dev, rng, scale, n=8, batches=[1, 4, 12, 24], prompts=[16, 128, 400],
                         new_tokens=[32, 64, 128], do_sample=True, top_p=0.9)


def whisper_train_varbatch_fp32(dev, rng, scale):
    """A speech encoder-decoder: 80 x 3000 log-mel inputs through a convolutional stem and
    transformer encoder, and a decoder over transcripts of variable length."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4,
                        encoder_attention_heads=6, decoder_attention_heads=6,
                        encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                        vocab_size=51865, max_source_positions=1500, max_target_positions=448,
                        pad_token_id=50256, decoder_start_token_id=50257, dropout=0.0)
    m = WhisperForConditionalGeneration(cfg).to(dev)

    def batch():
        b = rng.choice([4, 8, 16])
        g = torch.Generator(device="cpu").manual_seed(rng.randrange(1 << 30))
        feats = torch.randn(b, 80, 3000, generator=g).to(dev)
        labels = _lm_batch(dev, rng, 50000, [b], [24, 64, 128, 200])
        return {"input_features": feats, "labels": labels}

    yield from _train_seq2seq(m, batch, n=steps(14, scale), bf16=False)


def mixtral_moe_train_varlen_bf16(dev, rng, scale):
    """A mixture-of-experts decoder (8 experts, 2 per token): how many tokens each expert gets
    depends on the router, so block sizes change from step to step even at one shape."""
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=32000, hidden_size=768, intermediate_size=1536,
                        num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4,
                        num_local_experts=8, num_experts_per_tok=2,
                        max_position_embeddings=2048, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2)
    m = MixtralForCausalLM(cfg).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[2, 4, 8],
                         lengths=[256, 512, 768, 1024], n=16, bf16=True)


def dcgan_train_bf16_varbatch(dev, rng, scale):
    """A GAN: generator and discriminator trained alternately, each with its own optimizer."""
    nz, ngf, ndf = 128, 96, 96
    gen = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(),
        nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh()).to(dev)
    disc = nn.Sequential(
        nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Flatten()).to(dev)
    og = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for _ in range(steps(30, scale)):
        real = _images(dev, rng, [64, 128, 256], [64]).tanh()
        b = real.shape[0]
        z = torch.randn(b, nz, 1, 1, device=dev)
        with autocast(True):
            fake = gen(z)
            d_loss = (F.softplus(-disc(real)).mean() + F.softplus(disc(fake.detach())).mean())
        d_loss.backward()
        od.step()
        od.zero_grad(set_to_none=True)
        with autocast(True):
            g_loss = F.softplus(-disc(fake)).mean()
        g_loss.backward()
        og.step()
        og.zero_grad(set_to_none=True)
        yield d_loss.item() + g_loss.item()


# ---- FRESH: recorded as a check on the policy of commit e143bbc (never tuned on) ------------

def gpt2_infer_varlen_fp32(dev, rng, scale):
    """Forward passes of GPT-2 without a cache over batches of random size and length, the
    whole vocabulary's logits each time (scoring, not generation)."""
    m = _gpt2(12, 768, 12, vocab=50257).to(dev)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(40, scale)):
            ids = _lm_batch(dev, rng, 50257, [1, 2, 4, 8, 16],
                            [17, 64, 128, 300, 512, 777, 1024])
            logits = m(input_ids=ids, use_cache=False).logits
            yield float(logits[:, -1].float().sum().item())


def llama_train_varlen_fp32(dev, rng, scale):
    m = _llama(6, 768, 12, 12, 2048).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=32000, batches=[1, 2, 4, 8],
                         lengths=[100, 333, 512, 900, 1500, 2048], n=20, bf16=False)


def gptneox_train_varbatch_varlen_bf16(dev, rng, scale):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=1024, num_hidden_layers=8,
                        num_attention_heads=16, intermediate_size=4096,
                        max_position_embeddings=2048, hidden_dropout=0.0, attention_dropout=0.0)
    m = GPTNeoXForCausalLM(cfg).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=50304, batches=[2, 4, 8, 12],
                         lengths=[128, 256, 512, 768, 1024], n=20, bf16=True)


def regnet_y_800mf_train_varbatch(dev, rng, scale):
    import torchvision

    m = torchvision.models.regnet_y_800mf(weights=None, num_classes=100).to(dev)
    yield from _train_classifier(m, dev, rng, scale, n=20, batches=[32, 64, 96, 128],
                                 sizes=[224], bf16=False, classes=100)


def encoder_train_padmask_varlen_fp32(dev, rng, scale):
    """A Transformer encoder (torch.nn) classifying padded batches: each sequence of a batch
    has its own length, masked by `src_key_padding_mask`."""
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
    emb, head = nn.Embedding(20000, 512), nn.Linear(512, 10)
    m = nn.ModuleList([emb, enc, head]).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for _ in range(steps(30, scale)):
        b, t = rng.choice([16, 32, 64]), rng.choice([64, 128, 200, 256, 384, 512])
        g = torch.Generator(device="cpu").manual_seed(rng.randrange(1 << 30))
        ids = torch.randint(0, 20000, (b, t), generator=g).to(dev)
        lens = torch.randint(1, t + 1, (b,), generator=g).to(dev)
        pad = torch.arange(t, device=dev)[None, :] >= lens[:, None]
        h = enc(emb(ids), src_key_padding_mask=pad)
        h = h.masked_fill(pad[..., None], 0.0).sum(1) / lens[:, None]
        y = torch.randint(0, 10, (b,), device=dev)
        loss = F.cross_entropy(head(h), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield loss.item()


def efficientnet_v2_s_infer_varbatch_varres(dev, rng, scale):
    import torchvision

    m = torchvision.models.efficientnet_v2_s(weights=None).to(dev)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(30, scale)):
            x = _images(dev, rng, [1, 8, 32, 64], [224, 288, 384])
            yield float(m(x).float().sum().item())


def llama_generate_sample_varlen_bf16(dev, rng, scale):
    m = _llama(12, 1536, 12, 4, 4096).to(dev, dtype=torch.bfloat16)
    yield from _generate(m, dev, rng, scale, n=8, batches=[1, 4, 8, 24],
                         prompts=[20, 150, 600, 1200], new_tokens=[16, 64, 128],
                         do_sample=True, top_k=40, top_p=0.9)


def vit_l16_infer_varbatch_bf16(dev, rng, scale):
    import torchvision

    m = torchvision.models.vit_l_16(weights=None).to(dev)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(24, scale)):
            x = _images(dev, rng, [1, 4, 16, 48, 96], [224])
            with autocast(True):
                yield float(m(x).float().sum().item())


# ---- recorded after the handle cap of 80 MiB was chosen (the corpus's *later* group) ----------

def opt_train_varlen_bf16(dev, rng, scale):
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=50272, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, ffn_dim=3072, max_position_embeddings=1024,
                    word_embed_proj_dim=768, dropout=0.0, attention_dropout=0.0)
    m = OPTForCausalLM(cfg).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=50272, batches=[2, 4, 8],
                         lengths=[128, 256, 512, 1000], n=16, bf16=True)


def distilbert_mlm_train_varlen_fp32(dev, rng, scale):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    m = DistilBertForMaskedLM(DistilBertConfig(dropout=0.0, attention_dropout=0.0)).to(dev)
    yield from _train_lm(m, dev, rng, scale, vocab=30522, batches=[8, 16, 32],
                         lengths=[64, 128, 256, 512], n=16, bf16=False)


def resnet101_infer_varbatch_varres_fp32(dev, rng, scale):
    import torchvision

    m = torchvision.models.resnet101(weights=None).to(dev)
    m.eval()
    with torch.no_grad():
        for _ in range(steps(24, scale)):
            x = _images(dev, rng, [1, 16, 64], [192, 224, 288])
            yield float(m(x).float().sum().item())


def mobilenet_v2_train_varres_bf16(dev, rng, scale):
    import torchvision

    m = torchvision.models.mobilenet_v2(weights=None).to(dev)
    yield from _train_classifier(m, dev, rng, scale, n=16, batches=[32, 64, 128],
                                 sizes=[160, 192, 224], bf16=True)


WORKLOADS = {f.__name__: f for f in [
    gpt2_train_varlen_bf16,
    gpt2_train_ckpt_bf16,
    gpt2_train_accum_fp32,
    llama_gqa_train_varlen_bf16,
    llama_gqa_train_ckpt_accum_bf16,
    t5_train_varlen_bf16,
    gru_lm_train_varlen_fp32,
    gpt2_train_eval_interleave_bf16,
    gpt2_generate_sample_varbatch,
    llama_generate_beam_bf16,
    llama_generate_greedy_varbatch_fp32,
    llama_decode_manual_kvcat_bf16,
    bert_train_varbatch_varlen_bf16,
    bert_infer_varbatch_fp32,
    resnet50_train_varres_fp32,
    resnet18_infer_varbatch_bf16_cl,
    vit_b16_train_bf16_varbatch,
    convnext_tiny_train_fp32,
    efficientnet_b0_train_bf16_varres_cl,
    deeplabv3_train_varres,
    fasterrcnn_train_varres,
    unet_diffusion_train_bf16_ema,
    resnet18_train_side_stream_prefetch,
    mobilenet_v3_train_varbatch_bf16_cl,
    swin_t_train_fp32_varbatch,
    densenet121_train_varres_bf16,
    retinanet_train_varres,
    bert_mlm_train_accum_fp32,
    opt_generate_sample_bf16,
    whisper_train_varbatch_fp32,
    mixtral_moe_train_varlen_bf16,
    dcgan_train_bf16_varbatch,
    gpt2_infer_varlen_fp32,
    llama_train_varlen_fp32,
    gptneox_train_varbatch_varlen_bf16,
    regnet_y_800mf_train_varbatch,
    encoder_train_padmask_varlen_fp32,
    efficientnet_v2_s_infer_varbatch_varres,
    llama_generate_sample_varlen_bf16,
    vit_l16_infer_varbatch_bf16,
    opt_train_varlen_bf16,
    distilbert_mlm_train_varlen_fp32,
    resnet101_infer_varbatch_varres_fp32,
    mobilenet_v2_train_varres_bf16,
]}
