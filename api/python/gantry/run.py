"""Progress reports from a training run to Gantry (standard library only).

Inside a Gantry training Job, Gantry sets GANTRY_RUN_URL (where to report)
and GANTRY_RUN_TOKEN_FILE (the run's token: renewed by Kubernetes, read
afresh at every report). Anywhere else report() does nothing, so the same
script runs on a laptop.

    from gantry import run
    for step in range(start, total):
        loss = train_step()
        if step % 10 == 0:
            run.report(step=step, total_steps=total, metrics={"loss": loss})

A report that fails (Gantry away, a bad value) is logged once in a while and
never raised: progress is for people watching, never a reason to stop
training. report() returns whether Gantry took the report.

Callbacks for PyTorch Lightning, Hugging Face's Trainer and Keras are in
gantry.callbacks; they import their framework only when made.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from typing import Dict, Optional

log = logging.getLogger("gantry.run")

_TIMEOUT = 5.0
_last_warning = 0.0


def enabled() -> bool:
    """Whether this process runs as a Gantry training run that can report."""
    return bool(os.environ.get("GANTRY_RUN_URL") and os.environ.get("GANTRY_RUN_TOKEN_FILE"))


def report(step: int, total_steps: Optional[int] = None, epoch: Optional[float] = None,
           metrics: Optional[Dict[str, float]] = None, resumed_from: Optional[int] = None) -> bool:
    """Reports the run's step (and total steps, epoch, named metrics, and on
    its first report after a restart the checkpoint step it resumed from)."""
    r: Dict[str, object] = {"step": int(step)}
    if total_steps is not None:
        r["totalSteps"] = int(total_steps)
    if epoch is not None:
        r["epoch"] = float(epoch)
    if resumed_from is not None:
        r["resumedFrom"] = int(resumed_from)
    if metrics:
        # Only finite numbers: a NaN loss is worth seeing in the log, not a
        # refused report.
        r["metrics"] = {str(k): float(v) for k, v in metrics.items() if _finite(v)}
    return send([r])


def send(reports) -> bool:
    """Sends reports as the API takes them (a list of dicts: step,
    totalSteps, epoch, time, metrics, resumedFrom); False, logged, on any
    failure."""
    url, token_file = os.environ.get("GANTRY_RUN_URL"), os.environ.get("GANTRY_RUN_TOKEN_FILE")
    if not url or not token_file:
        return False
    try:
        with open(token_file) as f:
            token = f.read().strip()
        req = urllib.request.Request(url, data=json.dumps({"reports": list(reports)}).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=_TIMEOUT) as resp:
            resp.read()
        return True
    except urllib.error.HTTPError as e:
        detail = e.read(2000).decode("utf-8", "replace")
        _warn(f"progress report refused: {e.code} {detail}")
    except Exception as e:  # noqa: BLE001 — a report never stops the run
        _warn(f"progress report not sent: {e}")
    return False


def _finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _warn(msg: str) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= 60 or _last_warning == 0:
        _last_warning = now
        log.warning("%s (further failures within a minute are not logged)", msg)
