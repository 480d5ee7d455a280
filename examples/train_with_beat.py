"""A PyTorch-style training loop that reports progress to sentinel-probe.

    python examples/train_with_beat.py                       # a toy model if torch is installed, else a stand-in
    python examples/train_with_beat.py --step-s 0.2 --hang-after 50   # simulate a silent hang after 50 steps

Under torchrun every rank beats on its own (RANK / LOCAL_RANK are read from the environment), and the daemon
groups the ranks of one job (SENTINEL_JOB, else SLURM_JOB_ID / TORCHELASTIC_RUN_ID) into one condition.
Importing host_client.beat needs nothing but the standard library.
"""

import argparse
import time

from host_client.beat import Beat


def toy_step_factory():
    try:
        import torch
    except ImportError:
        return None
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    def step():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return float(loss)

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--step-s", type=float, default=0.2, help="stand-in step time when torch is absent")
    ap.add_argument("--hang-after", type=int, default=0, help="stop making progress after N steps (0: never)")
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--socket", default=None, help="default $SENTINEL_PROBE_SOCKET or /run/sentinel-probe/...")
    ap.add_argument("--job", default=None)
    args = ap.parse_args()

    train_step = toy_step_factory()
    with Beat(path=args.socket, job=args.job) as progress:  # leaving the block tells the daemon we are done
        progress.start()  # watched from now: a hang before the first step ends is caught (first-step deadline)
        for step in range(args.steps):
            if args.hang_after and step == args.hang_after:
                print("simulating a hang at step %d (Ctrl-C to stop)" % step, flush=True)
                while True:
                    time.sleep(3600)
            if train_step is not None:
                train_step()
                time.sleep(args.step_s)
            else:
                time.sleep(args.step_s)
            progress.beat(step)
            if args.checkpoint_every and step and step % args.checkpoint_every == 0:
                with progress.pause("checkpoint"):  # slow but legitimate: only the ceiling applies
                    time.sleep(args.step_s * 20)


if __name__ == "__main__":
    main()
