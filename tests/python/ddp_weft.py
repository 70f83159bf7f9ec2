"""torch.distributed on weft against gloo, in one job (run on every rank under weftrun):

- `dist.init_process_group("weft")` with no MASTER_ADDR: rank and size are weft's;
- a gloo group made with `dist.new_group(backend="gloo")` meets through weft's store;
- groups of part of the world (`dist.new_group(ranks)`) on weft against gloo's;
- every collective DistributedDataParallel, FSDP and ZeRO use, on both groups, with equal
  results (reductions in float64 of small integers, exact whatever the order);
- DistributedDataParallel of one MLP over weft and over gloo from the same start and data:
  losses and parameters equal, bitwise on 2 ranks (a + b is b + a), else within float32
  rounding of the reduction order.
Prints DDP-WEFT-OK.
"""

import os
import sys

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers the backend)


def check(cond, what):
    if not cond:
        print("ddp_weft rank %d: FAIL: %s" % (dist.get_rank(), what), flush=True)
        sys.exit(1)


def same_on_both(fn, weft_pg, gloo_pg, what):
    """fn(group) -> tensors on each group; asserts they are equal."""
    a, b = fn(weft_pg), fn(gloo_pg)
    for x, y in zip(a, b):
        check(torch.equal(x, y), "%s: weft %s, gloo %s" % (what, x.tolist(), y.tolist()))


def collectives(weft_pg, gloo_pg, rank, n):
    R = dist.ReduceOp
    for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG):
        def allreduce(g, op=op):
            t = torch.arange(6, dtype=torch.float64) + rank + 1
            if op == R.AVG and g is gloo_pg:  # gloo has no AVG: its definition
                dist.all_reduce(t, op=R.SUM, group=g)
                return [t / n]
            dist.all_reduce(t, op=op, group=g)
            return [t]
        same_on_both(allreduce, weft_pg, gloo_pg, "all_reduce %s" % getattr(op, "op", op))

    def broadcast(g):
        t = torch.full((5,), float(rank))
        dist.broadcast(t, src=n - 1, group=g)
        return [t]
    same_on_both(broadcast, weft_pg, gloo_pg, "broadcast")

    def all_gather(g):
        outs = [torch.zeros(3, 2) for _ in range(n)]
        dist.all_gather(outs, torch.full((3, 2), float(rank)), group=g)
        return outs
    same_on_both(all_gather, weft_pg, gloo_pg, "all_gather")

    def reduce(g):
        t = torch.arange(4, dtype=torch.float64) * (rank + 1)
        dist.reduce(t, dst=0, group=g)
        return [t] if rank == 0 else []
    same_on_both(reduce, weft_pg, gloo_pg, "reduce")

    # gloo 1.13 has no reduce_scatter nor all_gather_into_tensor: weft's against their definition.
    out = torch.zeros(n, 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)), group=weft_pg)
    check(torch.equal(out, torch.arange(n).float().repeat_interleave(3).view(n, 3)),
          "all_gather_into_tensor %s" % out.tolist())
    ins = [torch.full((4,), float(rank * 10 + j)) for j in range(n)]
    out = torch.zeros(4)
    dist.reduce_scatter(out, ins, group=weft_pg)
    check(torch.equal(out, torch.full((4,), float(sum(r * 10 + rank for r in range(n))))),
          "reduce_scatter %s" % out.tolist())
    out = torch.zeros(2)
    dist.reduce_scatter_tensor(out, torch.arange(2 * n, dtype=torch.float32) + rank,
                              group=weft_pg)
    want = torch.tensor([2 * rank + k for k in range(2)], dtype=torch.float32) * n + \
        sum(range(n))
    check(torch.equal(out, want), "reduce_scatter_tensor %s, not %s" % (out.tolist(),
                                                                        want.tolist()))

    def all_to_all(g):
        t = torch.arange(2 * n, dtype=torch.float32) + 100 * rank
        out = torch.zeros(2 * n)
        dist.all_to_all_single(out, t, group=g)
        return [out]
    same_on_both(all_to_all, weft_pg, gloo_pg, "all_to_all_single")

    def all_to_all_uneven(g):
        # rank r sends j + 1 rows of width 2 to rank j; receives r + 1 from each.
        ins = [j + 1 for j in range(n)]
        t = torch.arange(sum(ins) * 2, dtype=torch.float32).view(-1, 2) + 1000 * rank
        out = torch.zeros((rank + 1) * n, 2)
        dist.all_to_all_single(out, t, [rank + 1] * n, ins, group=g)
        return [out]
    same_on_both(all_to_all_uneven, weft_pg, gloo_pg, "all_to_all_single uneven")

    def p2p(g):
        t = torch.full((3,), float(rank))
        if rank == 0:
            dist.send(t + 7, dst=1, group=g)
        elif rank == 1:
            dist.recv(t, src=0, group=g)
        return [t]
    same_on_both(p2p, weft_pg, gloo_pg, "send/recv")

    def ring(g):
        # Every rank sends 4 MiB to the next and receives from the previous, all posted
        # before any is waited for (blocking sends of this size would wait for each other).
        out = torch.full((1 << 20,), float(rank))
        got = torch.zeros(1 << 20)
        ops = [dist.P2POp(dist.isend, out, (rank + 1) % n, group=g),
               dist.P2POp(dist.irecv, got, (rank - 1) % n, group=g)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return [got]
    same_on_both(ring, weft_pg, gloo_pg, "batch_isend_irecv ring")

    def objects(g):
        objs = [None] * n
        dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank}, group=g)
        lst = [("from root", n)] if rank == 0 else [None]
        dist.broadcast_object_list(lst, src=0, group=g)
        check(objs == [{"rank": r, "s": "x" * r} for r in range(n)] and
              lst == [("from root", n)], "object collectives: %r %r" % (objs, lst))
        return []
    same_on_both(objects, weft_pg, gloo_pg, "object collectives")
    dist.barrier(group=weft_pg)


def subgroups(rank, n):
    """dist.new_group of part of the world on weft (a weft subgroup) and on gloo: every
    rank calls both, members reduce within them."""
    for ranks in ([0, n - 1], list(range(0, n, 2)), [n - 1, 0][: 1 + (n > 2)]):
        w = dist.new_group(ranks)
        g = dist.new_group(ranks, backend="gloo")
        if rank not in ranks:
            check(w == dist.GroupMember.NON_GROUP_MEMBER, "a group for a non-member")
            continue
        check(dist.get_backend(w) == "weft" and w.size() == len(set(ranks)) and
              w.rank() == sorted(set(ranks)).index(rank), "subgroup %s: rank %d of %d"
              % (ranks, w.rank(), w.size()))

        def allreduce(pg):
            t = torch.arange(5, dtype=torch.float64) * (rank + 1)
            dist.all_reduce(t, group=pg)
            b = torch.full((2,), float(rank))
            dist.broadcast(b, src=max(ranks), group=pg)
            return [t, b]
        same_on_both(allreduce, w, g, "subgroup %s" % (ranks,))


def train(pg, steps, rank):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1234 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses), [p.detach().clone() for p in model.parameters()]


def main():
    check("MASTER_ADDR" not in os.environ, "MASTER_ADDR is set: the test is of weft's start")
    dist.init_process_group("weft")
    rank, n = dist.get_rank(), dist.get_world_size()
    check(rank == int(os.environ["WEFT_RANK"]) and n == int(os.environ["WEFT_WORLD_SIZE"]),
          "rank %d of %d, not weft's" % (rank, n))
    check(dist.get_backend() == "weft", "backend %s" % dist.get_backend())
    weft_pg = dist.distributed_c10d._get_default_group()
    gloo_pg = dist.new_group(backend="gloo")
    collectives(weft_pg, gloo_pg, rank, n)
    subgroups(rank, n)

    lw, pw = train(weft_pg, 6, rank)
    lg, pg = train(gloo_pg, 6, rank)
    if n == 2:
        check(torch.equal(lw, lg), "losses differ: weft %s, gloo %s" % (lw.tolist(),
                                                                         lg.tolist()))
        check(all(torch.equal(a, b) for a, b in zip(pw, pg)), "parameters differ bitwise")
    else:
        check(torch.allclose(lw, lg, rtol=1e-5, atol=1e-6), "losses differ: weft %s, gloo %s"
              % (lw.tolist(), lg.tolist()))
        check(all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(pw, pg)),
              "parameters differ")
    # Every rank holds the same parameters.
    for p in pw:
        ref = p.clone()
        dist.broadcast(ref, src=0)
        check(torch.equal(ref, p), "ranks hold different parameters")
    dist.destroy_process_group()
    print("rank %d: DDP-WEFT-OK (%d ranks, final loss %.6f)" % (rank, n, lw[-1].item()),
          flush=True)


if __name__ == "__main__":
    main()
