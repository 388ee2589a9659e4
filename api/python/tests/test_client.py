"""The Python client against a real `gantry serve` (GANTRY_SERVER and
GANTRY_TOKEN, set by the Go test that starts it: api/python_test.go), and
its retries against a stand-in that answers 503 first."""

import http.server
import json
import os
import re
import threading
import unittest

from gantry import ABSENT, Gantry, GantryError, Workload
from gantry.client import METHODS

HERE = os.path.dirname(os.path.abspath(__file__))
# The spec: $GANTRY_OPENAPI (the Go test sets it when the tests run apart
# from the sources), else the repository's.
SPEC = os.environ.get("GANTRY_OPENAPI") or os.path.join(HERE, "..", "..", "..", "openapi.yaml")


class CoverageTest(unittest.TestCase):
    def test_every_operation_has_a_method_or_is_absent(self):
        with open(SPEC) as f:
            ops = set(re.findall(r"^\s+operationId: (\w+)$", f.read(), re.M))
        self.assertTrue(ops, "no operations found in openapi.yaml")
        for op in sorted(ops):
            with self.subTest(operation=op):
                if op in ABSENT:
                    continue
                self.assertIn(op, METHODS, f"{op} has no method and is not listed in ABSENT")
                self.assertTrue(callable(getattr(Gantry, METHODS[op], None)), f"{op}: Gantry.{METHODS[op]} is missing")
        self.assertEqual(set(METHODS) | set(ABSENT), ops, "methods for operations openapi.yaml does not have")


class RetryTest(unittest.TestCase):
    def test_retries_503_honouring_retry_after(self):
        calls = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                calls.append(self.headers.get("Authorization"))
                if len(calls) < 3:
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/problem+json")
                    self.end_headers()
                    self.wfile.write(b'{"title": "Service Unavailable", "status": 503}')
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status": "ok"}')

            def log_message(self, *args):
                pass

        srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            g = Gantry(server=f"http://127.0.0.1:{srv.server_port}", token="gnt_test")
            self.assertEqual(g.health(), {"status": "ok"})
            self.assertEqual(calls, ["Bearer gnt_test"] * 3)
            g = Gantry(server=f"http://127.0.0.1:{srv.server_port}", token="gnt_test", retries=0)
            calls.clear()
            with self.assertRaises(GantryError) as e:
                g.health()
            self.assertEqual(e.exception.status, 503)
        finally:
            srv.shutdown()


@unittest.skipUnless(os.environ.get("GANTRY_SERVER") and os.environ.get("GANTRY_TOKEN"), "no Gantry server (api/python_test.go starts one)")
class ServerTest(unittest.TestCase):
    def setUp(self):
        self.g = Gantry()

    def test_launch_and_manage(self):
        g = self.g
        w = g.launch("dev-environment", team="vision", gpu="L4", count=1)
        self.assertIsInstance(w, Workload)
        self.assertEqual((w.team, w.status, w.gpu["class"]), ("vision", "Pending", "L4"))
        self.assertIn(w.id, [x.id for x in g.workloads(team="vision")])
        self.assertEqual(g.get(w.id).template, "dev-environment")
        self.assertEqual(g.stop(w.id).status, "Stopped")
        self.assertEqual(g.start(w.id).status, "Pending")
        # The same key launches once.
        a = g.launch("dev-environment", team="vision", idempotency_key="nb-cell-7")
        b = g.launch("dev-environment", team="vision", idempotency_key="nb-cell-7")
        self.assertEqual(a.id, b.id)
        # No cluster here: nothing runs, so waiting gives up, saying what it saw.
        with self.assertRaises(GantryError) as e:
            g.wait(w.id, timeout=1, poll=0.2)
        self.assertIn("still Pending", str(e.exception))
        with self.assertRaises(GantryError) as e:
            list(g.logs(w.id))
        self.assertEqual(e.exception.status, 409)
        self.assertEqual(g.events(w.id), [])
        g.delete(w.id)
        self.assertEqual(g.get(w.id).status, "Deleted")

    def test_workload_verbs(self):
        # A workload carries its verbs, as a notebook cell reaches for them.
        w = self.g.launch("dev-environment", team="vision", gpu="L4", count=1)
        self.assertEqual(w.refresh().id, w.id)
        self.assertEqual(w.stop().status, "Stopped")
        self.assertEqual(w.start().status, "Pending")
        self.assertEqual(w.events(), [])
        with self.assertRaises(GantryError) as e:
            w.wait(timeout=1, poll=0.2)  # no cluster here: nothing runs
        self.assertIn("still Pending", str(e.exception))
        with self.assertRaises(GantryError) as e:
            list(w.logs())
        self.assertEqual(e.exception.status, 409)
        listed = [x for x in self.g.workloads(team="vision") if x.id == w.id][0]
        self.assertEqual(listed.refresh().status, "Pending")
        self.assertNotIn(w.id, [x.id for x in self.g.workloads(team="vision", ended=True)])
        w.delete()
        self.assertEqual(self.g.get(w.id).status, "Deleted")
        # Its history: ended now, never ran here (no cluster), no exit code.
        h = [x for x in self.g.workloads(team="vision", ended=True) if x.id == w.id][0]
        self.assertTrue(h.ended_at)
        self.assertEqual((h.started_at, h.attempts, h.ran_seconds, h.exit_code), ("", 0, 0, None))

    def test_portal_snippet_runs(self):
        # The line the portal's workload page offers (Reproduce), as it
        # prints it: it must run, not stop at an AttributeError.
        snippet = ('from gantry import Gantry\n'
                   'w = Gantry().launch("dev-environment", team="vision", gpu="L4", count=1, parameters={})\n'
                   'w.wait(timeout=1, poll=0.2)')
        with self.assertRaises(GantryError) as e:
            exec(snippet, {})
        self.assertIn("still Pending", str(e.exception))

    def test_field_errors(self):
        with self.assertRaises(GantryError) as e:
            self.g.launch("dev-environment", team="vision", gpu="V100")
        self.assertIn("gpu.class", [x.field for x in e.exception.errors])
        with self.assertRaises(GantryError) as e:
            self.g.get("zzzzzzzzzz")
        self.assertEqual(e.exception.status, 404)

    def test_money_and_catalog(self):
        g = self.g
        est = g.estimate("jupyter-notebook", team="vision", min_memory_gib=30)
        self.assertGreater(est["pricePerHour"], 0)
        self.assertTrue(any(o["gpu"].get("migProfile") == "3g.40gb" for o in est["options"]))
        self.assertIn("items", g.costs(group_by="template"))
        self.assertIsInstance(g.budgets(), list)
        self.assertIn("jupyter-notebook", [t["name"] for t in g.templates()])
        self.assertEqual(g.gpu_class("H100-80GB")["price"]["unit"], "gpu-hour")
        self.assertEqual(g.me()["subject"] != "", True)
        self.assertIn("gantry_http_requests_total", g.gantry_metrics())
        self.assertEqual(json.loads(json.dumps(g.team_report("vision")))["team"], "vision")

    def test_platform_edits(self):
        # Prices, quotas and budgets changed through the API: in force at
        # once, listed with who made them, and gone again on reset. As a
        # platform admin (the Go test gives her token); lee may not.
        with self.assertRaises(GantryError) as e:
            self.g.set_price("L4", on_demand=1)
        self.assertEqual(e.exception.status, 403)
        g = Gantry(token=os.environ["GANTRY_PLATFORM_TOKEN"])
        before = g.gpu_class("L4")["price"]["onDemand"]
        edits = g.set_price("L4", on_demand=before + 0.25, spot=0.1)
        self.assertEqual([(e["kind"], e["key"]) for e in edits], [("price", "L4")])
        self.assertEqual(g.gpu_class("L4")["price"]["onDemand"], before + 0.25)
        g.set_budget("vision", 1234.5, atLimit="require-approval")
        self.assertEqual([b["amount"] for b in g.budgets() if b["team"] == "vision"], [1234.5])
        quota = [e for e in g.set_quota("vision", {"L4": 3}, cores=8) if e["kind"] == "quota"]
        self.assertEqual((quota[0]["value"]["gpus"], quota[0]["value"]["cores"]), ({"L4": 3}, 8))
        g.set_node_group("h100-on-demand", max=5, pricePerNodeHour=70)
        group = {n["name"]: n for n in g.node_groups()}["h100-on-demand"]
        self.assertEqual((group["max"], group["pricePerNodeHour"], group["gpuHourPrice"]), (5, 70, 8.75))
        self.assertEqual({e["kind"] for e in g.platform_edits()}, {"price", "budget", "quota", "nodeGroup"})
        with self.assertRaises(GantryError) as e:
            g.set_node_group("h100-reserved", max=3)
        self.assertEqual([x.field for x in e.exception.errors], ["max"])
        with self.assertRaises(GantryError) as e:
            g.set_budget("vision", -5)
        self.assertIn("amount", [x.field for x in e.exception.errors])
        for reset in (lambda: g.reset_price("L4"), lambda: g.reset_budget("vision"), lambda: g.reset_quota("vision"),
                      lambda: g.reset_node_group("h100-on-demand")):
            reset()
        self.assertEqual(g.platform_edits(), [])
        self.assertEqual(g.gpu_class("L4")["price"]["onDemand"], before)


if __name__ == "__main__":
    unittest.main()
