"""gantry.callbacks with fakes of the frameworks' callback interfaces
(sys.modules stand-ins): what each reports, and when."""

import sys
import types
import unittest
from unittest import mock

from gantry import callbacks, run


class _Base:
    def __init__(self, *a, **k):
        pass


def _fake(name, **attrs):
    m = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


class _Tensor:
    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


class CallbacksTest(unittest.TestCase):
    def setUp(self):
        p = mock.patch.object(run, "report", return_value=True)
        self.report = p.start()
        self.addCleanup(p.stop)

    def calls(self):
        return [c.kwargs for c in self.report.call_args_list]

    def test_lightning(self):
        lp = _fake("lightning.pytorch", Callback=_Base)
        with mock.patch.dict(sys.modules, {"lightning": _fake("lightning", pytorch=lp), "lightning.pytorch": lp}):
            cb = callbacks.lightning(every=2)
        trainer = types.SimpleNamespace(global_step=40, max_steps=-1, estimated_stepping_batches=100, current_epoch=1,
                                        callback_metrics={"loss": _Tensor(0.5), "name": "x", "flag": True})
        cb.on_train_start(trainer, None)  # resumed at step 40
        trainer.global_step = 41
        cb.on_train_batch_end(trainer, None, None, None, 0)  # odd: not reported
        trainer.global_step = 42
        cb.on_train_batch_end(trainer, None, None, None, 1)
        cb.on_train_epoch_end(trainer, None)
        self.assertEqual(self.calls(), [
            {"step": 42, "total_steps": 100, "epoch": 1.0, "metrics": {"loss": 0.5}, "resumed_from": 40},
            {"step": 42, "total_steps": 100, "epoch": 1.0, "metrics": {"loss": 0.5}, "resumed_from": None},
        ])

    def test_huggingface(self):
        with mock.patch.dict(sys.modules, {"transformers": _fake("transformers", TrainerCallback=_Base)}):
            cb = callbacks.huggingface(every=5)
        state = types.SimpleNamespace(global_step=0, max_steps=300, epoch=0.0)
        cb.on_train_begin(None, state, None)
        state.global_step, state.epoch = 5, 0.1
        cb.on_step_end(None, state, None)
        cb.on_log(None, state, None, logs={"loss": 1.25, "learning_rate": 3e-4, "epoch": 0.1})
        self.assertEqual(self.calls(), [
            {"step": 5, "total_steps": 300, "epoch": 0.1, "metrics": {}, "resumed_from": None},
            {"step": 5, "total_steps": 300, "epoch": 0.1, "metrics": {"loss": 1.25, "learning_rate": 3e-4, "epoch": 0.1}, "resumed_from": None},
        ])

    def test_keras(self):
        k = _fake("keras", callbacks=types.SimpleNamespace(Callback=_Base))
        with mock.patch.dict(sys.modules, {"keras": k}):
            cb = callbacks.keras(every=2)
        cb.params = {"epochs": 3, "steps": 4}
        cb.on_train_begin()
        cb.on_epoch_begin(0)
        for i in range(4):
            cb.on_train_batch_end(i, logs={"loss": 0.1 * (i + 1)})
        cb.on_epoch_end(0, logs={"loss": 0.4, "val_loss": 0.5})
        calls = self.calls()
        self.assertEqual([c["step"] for c in calls], [2, 4, 4])
        self.assertEqual(calls[0]["total_steps"], 12)
        self.assertEqual(calls[2], {"step": 4, "total_steps": 12, "epoch": 1.0, "metrics": {"loss": 0.4, "val_loss": 0.5}})

    def test_importing_needs_no_framework(self):
        for name in ("lightning", "pytorch_lightning", "transformers", "keras", "tensorflow"):
            self.assertNotIn(name, sys.modules, f"{name} imported by gantry")


if __name__ == "__main__":
    unittest.main()
