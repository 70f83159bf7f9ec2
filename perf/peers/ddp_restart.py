#!/usr/bin/env python3
"""The usual restart after a failure, for perf/peers/ddp_recovery.sh: every rank starts
again, joins a gloo process group through env:// (MASTER_ADDR, as torchrun sets it),
builds the model and optimizer, loads the torch.save checkpoint and wraps the model in
DistributedDataParallel. Rank 0 prints the seconds from DDP_T0 (the time before the
launcher started, from the shell) until every rank is ready: "restart_ready_s S".
"""

import argparse
import os
import time

import torch
import torch.distributed as dist



def make_model(hidden):
    """tests/python/ddp_elastic.py's model (not imported from there: that file imports
    weft, which a plain restart does not load)."""
    return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 4))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--ckpt", required=True)
    a.add_argument("--hidden", type=int, required=True)
    args = a.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = make_model(args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ck = torch.load(args.ckpt)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    torch.nn.parallel.DistributedDataParallel(model)
    dist.barrier()
    if dist.get_rank() == 0:
        print("restart_ready_s %.3f" % (time.time() - float(os.environ["DDP_T0"])), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
