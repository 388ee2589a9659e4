"""Gantry's Python client for notebooks (standard library only).

    from gantry import Gantry
    g = Gantry()                      # GANTRY_SERVER, GANTRY_TOKEN or the CLI's credentials
    w = g.launch("pytorch-train", team="vision", gpu="A100-80GB", count=4, parameters={"epochs": 3})
    w = g.wait(w.id)                  # until Running (or an error saying why)
    for line in g.logs(w.id, follow=True):
        print(line)
"""

from .client import Gantry, GantryError, FieldError, Workload, ABSENT

__all__ = ["Gantry", "GantryError", "FieldError", "Workload", "ABSENT"]
