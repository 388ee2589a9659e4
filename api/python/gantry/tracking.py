"""The experiment tracker a Gantry training Job logs to (its template's
spec.tracking): the same tracker run across restarts and requeues.

Weights & Biases needs nothing from here: Gantry sets WANDB_RUN_ID and
WANDB_RESUME=allow, so `wandb.init()` goes on in the run it began.
MLflow makes its own run ids, so a restarted job finds its run by its tag:

    import gantry.tracking
    with gantry.tracking.mlflow_run():
        mlflow.log_metric("loss", loss, step=step)

Outside a Gantry Job with a tracker (no GANTRY_TRACKING_RUN_ID), it starts
an MLflow run as mlflow.start_run() would. MLflow is imported only when
called.
"""

from __future__ import annotations

import os
from typing import Any

# RUN_TAG is the tag that names a workload's run in MLflow.
RUN_TAG = "gantry.run_id"


def run_id() -> str:
    """The workload's tracker run id (gantry-<workload id>), "" outside one."""
    return os.environ.get("GANTRY_TRACKING_RUN_ID", "")


def mlflow_run(**start: Any):
    """Start this workload's MLflow run, or resume it when an earlier run of
    the workload (before a restart or a requeue) began it: the run tagged
    gantry.run_id in the experiment MLFLOW_EXPERIMENT_NAME names. Keyword
    arguments go to mlflow.start_run for a new run."""
    import mlflow  # type: ignore

    rid = run_id()
    if not rid:
        return mlflow.start_run(**start)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    experiment = mlflow.set_experiment(name) if name else None
    ids = [experiment.experiment_id] if experiment is not None else None
    found = mlflow.search_runs(experiment_ids=ids, filter_string="tags.`%s` = '%s'" % (RUN_TAG, rid.replace("'", "")),
                               max_results=1, output_format="list")
    if found:
        return mlflow.start_run(run_id=found[0].info.run_id)
    tags = dict(start.pop("tags", None) or {})
    tags[RUN_TAG] = rid
    workload = os.environ.get("GANTRY_WORKLOAD_ID")
    if workload:
        tags["gantry.workload"] = workload
    start.setdefault("run_name", rid)
    return mlflow.start_run(tags=tags, **start)
