#!/usr/bin/env python3
"""A small real training run for Gantry's CPU training image.

Trains a two-layer network on synthetic regression data with PyTorch on the
CPU: a few hundred steps, the loss and step time logged, a checkpoint written
to the checkpoint directory every CHECKPOINT_EVERY steps, and, when started
again (a pod killed, a job requeued, a stop and a start), resumed from the
newest checkpoint so the run still ends at the same total steps.

Settings, from the environment:
  STEPS              total optimiser steps (300)
  CHECKPOINT_DIR     where checkpoints go ($GANTRY_CHECKPOINT_DIR, else
                     ./checkpoints)
  CHECKPOINT_EVERY   steps between checkpoints (50)
  LOG_EVERY          steps between log lines (10)
  STEP_DELAY         seconds to sleep after each step, to stand in for a
                     bigger model (0)
  SEED               the data and initial weights' seed (0)

The batch of each step is drawn from a generator seeded by the step, so a
resumed run sees the batches it would have seen without the interruption.

On SIGTERM — what a pod gets when Kueue suspends its Job to move it, when
it is evicted or preempted — it finishes the step at hand, writes a
checkpoint there and exits 143, so a move loses no finished step. (Only a
SIGKILL or a lost node costs the steps since the last checkpoint.) The
handler matters for another reason too: as a container's first process,
Python without one ignores SIGTERM and runs on until the grace period ends.

In a Gantry training Job it reports its progress with gantry.run (the
Python client, installed in the image): step, total steps, loss, step time
and samples/s at every log line, and the checkpoint step it resumed from.
"""
import signal

# Before anything slow (importing torch, loading a checkpoint): a SIGTERM
# from then on is kept, and the run stops at the next step it can.
STOP = []
signal.signal(signal.SIGTERM, lambda signum, frame: STOP.append(signum))

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

try:
    from gantry import run as gantry_run
except ImportError:  # outside the image: no reports
    gantry_run = None

STEPS = int(os.environ.get("STEPS", "300"))
CKPT_DIR = os.environ.get("CHECKPOINT_DIR") or os.environ.get("GANTRY_CHECKPOINT_DIR") or "checkpoints"
CKPT_EVERY = max(1, int(os.environ.get("CHECKPOINT_EVERY", "50")))
LOG_EVERY = max(1, int(os.environ.get("LOG_EVERY", "10")))
STEP_DELAY = float(os.environ.get("STEP_DELAY", "0"))
SEED = int(os.environ.get("SEED", "0"))
FEATURES, HIDDEN, BATCH = 32, 64, 256
KEEP = 3  # checkpoints kept


def log(msg):
    print(msg, flush=True)


def batch(step, w_true):
    g = torch.Generator().manual_seed(SEED * 1_000_003 + step)
    x = torch.randn(BATCH, FEATURES, generator=g)
    y = torch.tanh(x @ w_true) + 0.01 * torch.randn(BATCH, 1, generator=g)
    return x, y


def newest_checkpoint():
    paths = sorted(glob.glob(os.path.join(CKPT_DIR, "step-*.pt")))
    return paths[-1] if paths else None


def save(step, model, opt):
    os.makedirs(CKPT_DIR, exist_ok=True)
    path = os.path.join(CKPT_DIR, "step-%08d.pt" % step)
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmp)
    os.replace(tmp, path)  # a checkpoint is whole or absent
    for old in sorted(glob.glob(os.path.join(CKPT_DIR, "step-*.pt")))[:-KEEP]:
        os.remove(old)
    log("checkpoint step %d: %s" % (step, path))


def main():
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    torch.manual_seed(SEED)
    w_true = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(SEED + 7))
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    start = 0
    ckpt = newest_checkpoint()
    if ckpt:
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        log("resumed from step %d (%s)" % (start, ckpt))
    else:
        log("starting at step 0 of %d (no checkpoint in %s)" % (STEPS, CKPT_DIR))

    if STOP:
        log("stopped by signal %d before a step; a new run resumes from step %d" % (STOP[0], start))
        return 128 + STOP[0]
    loss_fn = torch.nn.MSELoss()
    resumed_from = start if ckpt else None
    if start >= STEPS:
        log("finished %d/%d steps (all done before this run)" % (STEPS, STEPS))
        if gantry_run is not None:
            gantry_run.report(step=STEPS, total_steps=STEPS, resumed_from=resumed_from)
        return 0
    window = time.monotonic()
    for step in range(start + 1, STEPS + 1):
        x, y = batch(step, w_true)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if STEP_DELAY:
            time.sleep(STEP_DELAY)
        if step % LOG_EVERY == 0 or step == STEPS:
            now = time.monotonic()
            n = LOG_EVERY if step % LOG_EVERY == 0 else step % LOG_EVERY
            metrics = {"loss": round(loss.item(), 6), "step_time_ms": round((now - window) * 1000 / n, 3),
                       "samples_per_s": round(BATCH * n / max(now - window, 1e-9), 1)}
            log(json.dumps({"step": step, "total_steps": STEPS, **metrics}))
            if gantry_run is not None:
                gantry_run.report(step=step, total_steps=STEPS, metrics=metrics,
                                  resumed_from=resumed_from)
                resumed_from = None
            window = now
        stopping = bool(STOP)  # read once: a signal may land at any line
        if step % CKPT_EVERY == 0 or step == STEPS or stopping:
            save(step, model, opt)
        if stopping and step < STEPS:
            log("stopped by signal %d at step %d; checkpoint written, a new run resumes here" % (STOP[0], step))
            if gantry_run is not None and step % LOG_EVERY != 0:
                gantry_run.report(step=step, total_steps=STEPS, metrics={"loss": round(loss.item(), 6)},
                                  resumed_from=resumed_from)
            return 128 + STOP[0]
    log("finished %d/%d steps, final loss %.6f" % (STEPS, STEPS, loss.item()))


if __name__ == "__main__":
    sys.exit(main())
