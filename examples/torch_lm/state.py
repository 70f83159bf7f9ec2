"""What a member trains and what weft snapshots and migrates of it.

The state is every parameter and its two Adam moments. The body's are replicated on
every member; the embedding's and the output layer's rows are sharded by vocabulary
(member r of the group holds the rows weft.shard_range(V, W, r) gives). The layout of
the state over a list of member ids says exactly that, so a member's packed buffer of it
is what a snapshot copies and what a migration moves when the members change.
"""

import hashlib

import numpy as np
import torch

import weft
import weft.torch as wt

from .model import Body

VOCAB_TENSORS = ("embed", "head")
MOMENTS = ("adam_m", "adam_v")
BETAS, EPS = (0.9, 0.99), 1e-8


def body_shapes(cfg):
    """(name, shape) of the body's parameters, without building it twice."""
    with torch.random.fork_rng(devices=[]):
        body = Body(cfg.d_model, cfg.heads, cfg.layers, cfg.seq)
    return [("body." + n, tuple(p.shape)) for n, p in body.named_parameters()]


def layout_of(cfg, members):
    """The state over @p members (stable ids, in group rank order)."""
    params = [(n, (cfg.vocab, cfg.d_model)) for n in VOCAB_TENSORS] + body_shapes(cfg)
    names = [(n, s) for n, s in params] + [("%s.%s" % (m, n), s) for m in MOMENTS
                                           for n, s in params]
    layout = weft.Layout.from_tensors({n: (s, weft.F32) for n, s in names})
    for n, _ in names:
        if n.split(".")[-1] in VOCAB_TENSORS:
            layout.shard(n, 0, members)
        else:
            layout.replicate(n, members)
    return layout


class TrainState:
    """The modules and optimizer state of this member, on group @p group."""

    def __init__(self, cfg, group):
        self.cfg, self.group = cfg, group
        self.share = weft.batch_share(cfg.batch, group.size, group.rank)
        self.layout = layout_of(cfg, group.member_ids)
        self.body = Body(cfg.d_model, cfg.heads, cfg.layers, cfg.seq)
        self.embed = wt.VocabParallelEmbedding(group, cfg.vocab, cfg.d_model)
        self.range = self.embed.vocab_range
        self.head = torch.nn.Parameter(torch.zeros(self.range.padded_length, cfg.d_model))
        self.xent = wt.VocabParallelCrossEntropy(group, algo="alg2", vocab_size=cfg.vocab)
        self.params = {"embed": self.embed.weight, "head": self.head}
        self.params.update(("body." + n, p) for n, p in self.body.named_parameters())
        self.moments = {"%s.%s" % (m, n): torch.zeros_like(p) for m in MOMENTS
                        for n, p in self.params.items()}
        self.packed = np.zeros(self.layout.packed_bytes(group.member_id()), np.uint8)

    @classmethod
    def initial(cls, cfg, group):
        """Step 0: the whole embedding and output layer drawn from one seed (the same
        whatever the width), this member's rows kept; the body from torch's seed."""
        state = cls(cfg, group)
        torch.manual_seed(cfg.seed)
        body = Body(cfg.d_model, cfg.heads, cfg.layers, cfg.seq)
        state.body.load_state_dict(body.state_dict())
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        r = state.range
        with torch.no_grad():
            for name in VOCAB_TENSORS:
                whole = torch.randn(cfg.vocab, cfg.d_model, generator=gen) * 0.02
                state.params[name].zero_()
                state.params[name][:r.length] = whole[r.start:r.start + r.length]
        return state

    @classmethod
    def from_packed(cls, cfg, group, buf):
        """The state in @p buf, this member's packed buffer of layout_of(group members)."""
        state = cls(cfg, group)
        with torch.no_grad():
            for p in state.params.values():
                p.zero_()  # padding rows stay zero
        state.copy(buf, into_tensors=True)
        return state

    # -- the packed buffer ---------------------------------------------------------------
    def _local(self, name):
        """(this member's tensor of @p name, its first global row)."""
        if name in self.params:
            t = self.params[name]
        else:
            t = self.moments[name]
        if name.split(".")[-1] in VOCAB_TENSORS:
            return t[:self.range.length], self.range.start
        return t, 0

    def copy(self, buf, into_tensors):
        """Copy between the tensors and packed buffer @p buf (a uint8 array)."""
        me = self.group.member_id()
        infos = self.layout.tensors
        flat = torch.from_numpy(np.asarray(buf).reshape(-1)[:self.packed.size])
        for r in self.layout.regions(me):
            local, first = self._local(infos[r.tensor].name)
            rows = slice(r.box.offset[0] - first, r.box.offset[0] - first + r.box.extent[0])
            part = local.data[rows]
            if tuple(part.shape) != r.box.extent:
                raise RuntimeError("%s: region %s is not this member's rows" %
                                   (infos[r.tensor].name, r.box))
            view = flat[r.packed_offset:r.packed_offset + r.nbytes].view(torch.float32)
            view = view.view(r.box.extent)
            if into_tensors:
                part.copy_(view)
            else:
                view.copy_(part)
        return buf

    def pack(self):
        """This member's packed buffer of the state, up to date."""
        return self.copy(self.packed, into_tensors=False)

    # -- a step --------------------------------------------------------------------------
    def reduce_body_grads(self):
        """Sum the body's gradients over the group (each rank's covers its share of the
        batch; the loss is already the mean over the global batch)."""
        grads = [p.grad for p in self.body.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.group.allreduce(flat)
        at = 0
        for g in grads:
            g.copy_(flat[at:at + g.numel()].view_as(g))
            at += g.numel()

    def adam(self, step):
        """Adam with bias correction, elementwise on every tensor: the same bits on a
        shard as on the whole."""
        b1, b2 = BETAS
        lr = self.cfg.lr
        with torch.no_grad():
            for name, p in self.params.items():
                g = p.grad
                m, v = self.moments["adam_m." + name], self.moments["adam_v." + name]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v / (1 - b2 ** step)).sqrt_().add_(EPS)
                p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))
                p.grad = None

    def close(self):
        """Destroy the vocabularies now (before any are made at a new membership)."""
        for p in self.params.values():
            p.grad = None
        self.xent.close()
        self.embed.close()


def gather_digests(state):
    """SHA-256 of every tensor of the state, whole (gathered on group rank 0 with one
    migration): {name: hex} on rank 0, None elsewhere."""
    g = state.group
    ids, me = g.member_ids, g.member_id()
    src = state.layout
    dst = weft.Layout.from_tensors({t.name: (t.shape, t.dtype) for t in src.tensors})
    for i in range(dst.num_tensors):
        dst.whole(i, ids[0])
    out = np.zeros(dst.packed_bytes(me), np.uint8)
    weft.migrate(g, weft.Plan(src, dst), state.pack(), out)
    if g.rank != 0:
        return None
    names = [t.name for t in dst.tensors]
    return {names[r.tensor]: hashlib.sha256(out[r.packed_offset:r.packed_offset + r.nbytes])
            .hexdigest() for r in dst.regions(me)}
