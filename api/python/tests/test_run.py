"""gantry.run against a stand-in for Gantry's progress route (a local HTTP
server): what a report sends, the token read afresh each time, and failures
that never raise."""

import json
import os
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer
from unittest import mock

from gantry import run


class _Progress(BaseHTTPRequestHandler):
    got = []
    status = 202

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).got.append((self.path, self.headers["Authorization"], body))
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"reported": true}' if type(self).status < 300 else b'{"title": "Unprocessable"}')

    def log_message(self, *args):
        pass


class RunTest(unittest.TestCase):
    def setUp(self):
        _Progress.got, _Progress.status = [], 202
        self.srv = HTTPServer(("127.0.0.1", 0), _Progress)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        d = tempfile.mkdtemp()
        self.token = os.path.join(d, "token")
        with open(self.token, "w") as f:
            f.write("tok-1\n")
        url = f"http://127.0.0.1:{self.srv.server_port}/api/v1/workloads/abcd123456/progress"
        p = mock.patch.dict(os.environ, {"GANTRY_RUN_URL": url, "GANTRY_RUN_TOKEN_FILE": self.token})
        p.start()
        self.addCleanup(p.stop)

    def test_report(self):
        self.assertTrue(run.enabled())
        ok = run.report(step=120, total_steps=300, epoch=0.4, metrics={"loss": 0.25, "lr": float("nan")}, resumed_from=100)
        self.assertTrue(ok)
        path, auth, body = _Progress.got[0]
        self.assertEqual(path, "/api/v1/workloads/abcd123456/progress")
        self.assertEqual(auth, "Bearer tok-1")
        self.assertEqual(body, {"reports": [{"step": 120, "totalSteps": 300, "epoch": 0.4, "resumedFrom": 100, "metrics": {"loss": 0.25}}]})

    def test_token_read_each_time(self):
        run.report(step=1)
        with open(self.token, "w") as f:
            f.write("tok-2")  # the kubelet renewed it
        run.report(step=2)
        self.assertEqual([a for _, a, _ in _Progress.got], ["Bearer tok-1", "Bearer tok-2"])

    def test_failures_never_raise(self):
        _Progress.status = 422
        with self.assertLogs("gantry.run", level="WARNING"):
            self.assertFalse(run.report(step=3))
        self.srv.shutdown()
        self.srv.server_close()
        self.assertFalse(run.report(step=4))  # nothing listening

    def test_outside_gantry_a_no_op(self):
        with mock.patch.dict(os.environ, {"GANTRY_RUN_URL": ""}):
            self.assertFalse(run.enabled())
            self.assertFalse(run.report(step=5))
        self.assertEqual(len(_Progress.got), 0)


if __name__ == "__main__":
    unittest.main()
