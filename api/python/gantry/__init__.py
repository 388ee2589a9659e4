"""Gantry's Python client for notebooks (standard library only).

    from gantry import Gantry
    g = Gantry()                      # GANTRY_SERVER, GANTRY_TOKEN or the CLI's credentials
    w = g.launch("pytorch-train", team="vision", gpu="A100-80GB", count=4, parameters={"epochs": 3})
    w = g.wait(w.id)                  # until Running (or an error saying why)
    for line in g.logs(w.id, follow=True):
        print(line)

In a training Job, gantry.run.report(step=…, total_steps=…, metrics=…) tells
Gantry how far the run is (a no-op anywhere else).
"""

from .client import Gantry, GantryError, FieldError, Workload, ABSENT
from . import run, callbacks, tracking

__all__ = ["Gantry", "GantryError", "FieldError", "Workload", "ABSENT", "run", "callbacks", "tracking"]
