"""gantry.tracking with a fake of MLflow's module (a sys.modules
stand-in): a workload's first start makes its tagged run, a restart finds
and resumes it."""

import os
import sys
import types
import unittest
from unittest import mock

from gantry import tracking


class FakeMLflow(types.ModuleType):
    def __init__(self):
        super().__init__("mlflow")
        self.runs = []  # (run_id, experiment, tags, name)
        self.started = []
        self.experiment = "exp-Default"

    def set_experiment(self, name):
        self.experiment = "exp-" + name
        return types.SimpleNamespace(experiment_id=self.experiment)

    def search_runs(self, experiment_ids=None, filter_string="", max_results=1, output_format="list"):
        out = []
        for rid, exp, tags, _ in self.runs:
            if (experiment_ids is None or exp in experiment_ids) and "tags.`gantry.run_id` = '%s'" % tags.get("gantry.run_id") == filter_string:
                out.append(types.SimpleNamespace(info=types.SimpleNamespace(run_id=rid)))
        return out[:max_results]

    def start_run(self, run_id=None, run_name=None, tags=None, **kw):
        if run_id is None:
            run_id = "r%d" % len(self.runs)
            self.runs.append((run_id, self.experiment, dict(tags or {}), run_name))
        self.started.append(run_id)
        return run_id


class TrackingTest(unittest.TestCase):
    def setUp(self):
        self.mlflow = FakeMLflow()
        p = mock.patch.dict(sys.modules, {"mlflow": self.mlflow})
        p.start()
        self.addCleanup(p.stop)

    def test_same_run_across_restarts(self):
        env = {"GANTRY_TRACKING_RUN_ID": "gantry-wk000001", "GANTRY_WORKLOAD_ID": "wk000001", "MLFLOW_EXPERIMENT_NAME": "cpu-train"}
        with mock.patch.dict(os.environ, env):
            first = tracking.mlflow_run(tags={"team": "vision"})
            again = tracking.mlflow_run()  # the job restarted
        self.assertEqual(first, again)
        self.assertEqual(len(self.mlflow.runs), 1)
        _, _, tags, name = self.mlflow.runs[0]
        self.assertEqual(tags, {"team": "vision", "gantry.run_id": "gantry-wk000001", "gantry.workload": "wk000001"})
        self.assertEqual(name, "gantry-wk000001")

    def test_another_workload_gets_its_own_run(self):
        with mock.patch.dict(os.environ, {"GANTRY_TRACKING_RUN_ID": "gantry-wk000001", "MLFLOW_EXPERIMENT_NAME": "cpu-train"}):
            a = tracking.mlflow_run()
        with mock.patch.dict(os.environ, {"GANTRY_TRACKING_RUN_ID": "gantry-wk000002", "MLFLOW_EXPERIMENT_NAME": "cpu-train"}):
            b = tracking.mlflow_run()
        self.assertNotEqual(a, b)

    def test_runs_are_per_experiment(self):
        env = {"GANTRY_TRACKING_RUN_ID": "gantry-wk000001", "MLFLOW_EXPERIMENT_NAME": "cpu-train"}
        with mock.patch.dict(os.environ, env):
            a = tracking.mlflow_run()
        env["MLFLOW_EXPERIMENT_NAME"] = "other"
        with mock.patch.dict(os.environ, env):
            b = tracking.mlflow_run()
        self.assertNotEqual(a, b)
        self.assertEqual([r[1] for r in self.mlflow.runs], ["exp-cpu-train", "exp-other"])

    def test_outside_a_job(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            tracking.mlflow_run()
        self.assertEqual(self.mlflow.runs[0][2], {})
        self.assertEqual(tracking.run_id(), "")


if __name__ == "__main__":
    unittest.main()
