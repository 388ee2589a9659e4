"""Progress callbacks for the training frameworks people use, reporting
through gantry.run. Each factory imports its framework only when called, so
importing this module costs nothing and needs none of them.

    trainer = lightning.Trainer(callbacks=[gantry.callbacks.lightning()])
    trainer = transformers.Trainer(..., callbacks=[gantry.callbacks.huggingface()])
    model.fit(x, y, callbacks=[gantry.callbacks.keras()])

Every callback reports the step, the total steps when the framework knows
them, the epoch and the numeric metrics the framework logged, at most every
`every` steps (and at the end of each epoch). Outside a Gantry training Job
they do nothing.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, Optional

from . import run


def _numbers(logs: Optional[Dict[str, Any]]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for k, v in (logs or {}).items():
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):
            try:
                v = v.item()  # a tensor or a numpy scalar
            except Exception:  # noqa: BLE001 — not a scalar
                continue
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            out[str(k).replace(" ", "_")] = float(v)
    return out


def lightning(every: int = 10):
    """A PyTorch Lightning callback (lightning.pytorch or pytorch_lightning)."""
    try:
        from lightning.pytorch import Callback  # type: ignore
    except ImportError:
        from pytorch_lightning import Callback  # type: ignore

    class GantryProgress(Callback):
        def __init__(self):
            super().__init__()
            self._resumed: Optional[int] = None

        def on_train_start(self, trainer, pl_module):
            step = int(getattr(trainer, "global_step", 0) or 0)
            self._resumed = step if step > 0 else None

        def _report(self, trainer):
            total = getattr(trainer, "max_steps", -1)
            if total is None or total < 0:
                total = getattr(trainer, "estimated_stepping_batches", None)
            try:
                total = int(total) if total is not None and float(total) != float("inf") else None
            except (TypeError, ValueError):
                total = None
            run.report(step=int(trainer.global_step), total_steps=total, epoch=float(getattr(trainer, "current_epoch", 0)),
                       metrics=_numbers(getattr(trainer, "callback_metrics", None)), resumed_from=self._resumed)
            self._resumed = None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if int(trainer.global_step) % every == 0:
                self._report(trainer)

        def on_train_epoch_end(self, trainer, pl_module):
            self._report(trainer)

    return GantryProgress()


def huggingface(every: int = 10):
    """A Hugging Face transformers TrainerCallback."""
    from transformers import TrainerCallback  # type: ignore

    class GantryProgress(TrainerCallback):
        def __init__(self):
            self._resumed: Optional[int] = None
            self._metrics: Dict[str, float] = {}

        def on_train_begin(self, args, state, control, **kwargs):
            self._resumed = int(state.global_step) if state.global_step else None

        def _report(self, state):
            run.report(step=int(state.global_step), total_steps=int(state.max_steps) if state.max_steps else None,
                       epoch=float(state.epoch) if state.epoch is not None else None, metrics=dict(self._metrics),
                       resumed_from=self._resumed)
            self._resumed = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            self._metrics.update(_numbers(logs))
            self._report(state)

        def on_step_end(self, args, state, control, **kwargs):
            if int(state.global_step) % every == 0:
                self._report(state)

    return GantryProgress()


def keras(every: int = 10, total_steps: Optional[int] = None):
    """A Keras callback (keras, or tf.keras). Keras does not know the run's
    total steps: pass total_steps, or it is taken as epochs × steps per epoch
    when fit says them."""
    try:
        import keras as _keras  # type: ignore
        Callback = _keras.callbacks.Callback
    except ImportError:
        from tensorflow import keras as _keras  # type: ignore
        Callback = _keras.callbacks.Callback

    class GantryProgress(Callback):
        def __init__(self):
            super().__init__()
            self._step = 0
            self._epoch = 0
            self._total = total_steps

        def on_train_begin(self, logs=None):
            p = getattr(self, "params", None) or {}
            if self._total is None and p.get("epochs") and p.get("steps"):
                self._total = int(p["epochs"]) * int(p["steps"])

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            self._step += 1
            if self._step % every == 0:
                run.report(step=self._step, total_steps=self._total, epoch=float(self._epoch), metrics=_numbers(logs))

        def on_epoch_end(self, epoch, logs=None):
            run.report(step=self._step, total_steps=self._total, epoch=float(epoch + 1), metrics=_numbers(logs))

    return GantryProgress()
