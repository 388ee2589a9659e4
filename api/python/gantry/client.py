"""The client: one method per operation of openapi.yaml (ABSENT lists the
ones deliberately left out), problem+json errors raised as GantryError with
their field errors, retries with backoff on 429 and 503 honouring
Retry-After, and an Idempotency-Key on every launch."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

# Operations this client deliberately has no method for, and why.
ABSENT = {
    "pushTelemetry": "only node agents push telemetry, with their ServiceAccount token",
    "getOpenAPI": "the spec is a file, not data: read openapi.yaml",
    "reportProgress": "a training run reports with gantry.run.report, by its pod's run token, not a person's client",
    "watchWorkload": "server-sent events for browsers (the portal); from Python, wait() follows a workload",
}


@dataclass
class FieldError:
    field: str
    detail: str


class GantryError(Exception):
    """An answer that is not a success: the HTTP status, the problem's title
    and detail, and each field problem."""

    def __init__(self, status: int, title: str, detail: str = "", errors: Optional[List[FieldError]] = None):
        self.status, self.title, self.detail = status, title, detail
        self.errors = errors or []
        text = detail or title
        if self.errors:
            text += ": " + "; ".join(f"{e.field}: {e.detail}" for e in self.errors)
        super().__init__(f"{status} {text}")


@dataclass
class Workload:
    id: str
    name: str
    team: str
    owner: str
    template: str
    status: str
    reason: str = ""
    gpu: Dict[str, Any] = field(default_factory=dict)
    price_per_hour: float = 0.0
    cost_so_far: float = 0.0
    url: str = ""
    approval: Optional[Dict[str, Any]] = None
    # Its history: ISO 8601 times ("" until it started / while it is live),
    # seconds Running over all its attempts, and its exit code (None: unknown).
    started_at: str = ""
    ended_at: str = ""
    ran_seconds: float = 0.0
    attempts: int = 0
    exit_code: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    client: Optional["Gantry"] = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, d: Dict[str, Any], client: Optional["Gantry"] = None) -> "Workload":
        return cls(id=d["id"], name=d["name"], team=d["team"], owner=d["owner"], template=d["template"],
                   status=d["status"], reason=d.get("reason", ""), gpu=d.get("gpu", {}),
                   price_per_hour=d.get("pricePerHour", 0.0), cost_so_far=d.get("costSoFar", 0.0),
                   url=d.get("url", ""), approval=d.get("approval"),
                   started_at=d.get("startedAt", ""), ended_at=d.get("endedAt", ""), ran_seconds=d.get("ranSeconds", 0.0),
                   attempts=d.get("attempts", 0), exit_code=d.get("exitCode"), raw=d, client=client)

    # The workload's own verbs, what a notebook cell reaches for: each asks
    # the server it came from and returns the workload as it is now.

    def _g(self) -> "Gantry":
        if self.client is None:
            raise GantryError(0, "this Workload was not read from a server", "use Gantry().get(id)")
        return self.client

    def refresh(self) -> "Workload":
        return self._g().get(self.id)

    def wait(self, timeout: float = 1800, until=("Running", "Succeeded"), poll: float = 1.0) -> "Workload":
        return self._g().wait(self.id, timeout=timeout, until=until, poll=poll)

    def logs(self, follow: bool = False, tail: Optional[int] = None) -> Iterator[str]:
        return self._g().logs(self.id, follow=follow, tail=tail)

    def events(self) -> List[Dict[str, Any]]:
        return self._g().events(self.id)

    def metrics(self, series: Optional[List[str]] = None, since: Optional[str] = None, step: Optional[str] = None) -> Dict[str, Any]:
        return self._g().metrics(self.id, series=series, since=since, step=step)

    def advice(self) -> Any:
        return self._g().advice(self.id)

    def stop(self) -> "Workload":
        return self._g().stop(self.id)

    def start(self) -> "Workload":
        return self._g().start(self.id)

    def keepalive(self) -> "Workload":
        return self._g().keepalive(self.id)

    def delete(self) -> None:
        self._g().delete(self.id)


def _credentials(server: str) -> str:
    """The ID token `gantry login` stored for server, if still valid."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    try:
        with open(os.path.join(base, "gantry", "credentials.json")) as f:
            creds = json.load(f).get("servers", {}).get(server, {})
    except (OSError, ValueError):
        return ""
    return creds.get("idToken", "")


class Gantry:
    """A Gantry server, signed in with a personal access token (GANTRY_TOKEN,
    or token=) or, failing that, the ID token the CLI stored."""

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None,
                 retries: int = 4, timeout: float = 30.0):
        self.server = (server or os.environ.get("GANTRY_SERVER") or "http://127.0.0.1:8080").rstrip("/")
        self.token = token or os.environ.get("GANTRY_TOKEN") or _credentials(self.server)
        self.retries, self.timeout = retries, timeout

    # -- transport -------------------------------------------------------

    def _open(self, method: str, path: str, query: Optional[Dict[str, Any]] = None, body: Any = None,
              headers: Optional[Dict[str, str]] = None, stream: bool = False):
        q = {k: ("true" if v is True else "false" if v is False else v) for k, v in (query or {}).items() if v is not None}
        url = self.server + path + ("?" + urllib.parse.urlencode(q) if q else "")
        data = json.dumps(body).encode() if body is not None else None
        h = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, method=method, headers=h)
            try:
                return urllib.request.urlopen(req, timeout=None if stream else self.timeout)
            except urllib.error.HTTPError as e:
                if e.code in (429, 503) and attempt < self.retries:
                    time.sleep(_retry_after(e.headers.get("Retry-After"), attempt))
                    continue
                raise _problem(e) from None

    def _call(self, method: str, path: str, query: Optional[Dict[str, Any]] = None, body: Any = None,
              headers: Optional[Dict[str, str]] = None) -> Any:
        with self._open(method, path, query, body, headers) as resp:
            raw = resp.read()
            if not raw:
                return None
            if "json" in resp.headers.get("Content-Type", ""):
                return json.loads(raw)
            return raw.decode()

    # -- workloads ---------------------------------------------------------

    def launch(self, template: str, team: str, gpu: Optional[str] = None, count: Optional[int] = None,
               mig: Optional[str] = None, parameters: Optional[Dict[str, Any]] = None,
               version: Optional[int] = None, idempotency_key: Optional[str] = None,
               cpu_only: bool = False, max_delay: Optional[str] = None, deadline: Optional[str] = None) -> Workload:
        """Launch a template (createWorkload). A key per intended launch makes a
        retried call launch once. cpu_only takes the template's CPU-only choice
        (no GPU, priced per core-hour). A flexible template's job may be held
        for cleaner power: at most max_delay ("0s": start at once), finished by
        deadline (RFC 3339)."""
        body = _launch_body(template, team, gpu, count, mig, parameters, version, cpu_only)
        if max_delay is not None:
            body["maxDelay"] = max_delay
        if deadline is not None:
            body["deadline"] = deadline
        return Workload.of(self._call("POST", "/api/v1/workloads", body=body,
                                      headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())}), self)

    def estimate(self, template: str, team: str, gpu: Optional[str] = None, count: Optional[int] = None,
                 mig: Optional[str] = None, parameters: Optional[Dict[str, Any]] = None,
                 min_memory_gib: Optional[float] = None, cpu_only: bool = False) -> Dict[str, Any]:
        """What a launch would cost and whether it would start now (estimateWorkload)."""
        return self._call("POST", "/api/v1/workloads/estimate", {"minMemoryGiB": min_memory_gib},
                          body=_launch_body(template, team, gpu, count, mig, parameters, None, cpu_only))

    def workloads(self, team: Optional[str] = None, status: Optional[str] = None, ended: bool = False) -> List[Workload]:
        """Every workload the caller may read (listWorkloads, all pages); ended=True
        for a history: only those that have ended, with how long each ran."""
        out, cursor = [], None
        while True:
            page = self._call("GET", "/api/v1/workloads", {"team": team, "status": status, "ended": "true" if ended else None, "cursor": cursor})
            out += [Workload.of(w, self) for w in page["items"]]
            cursor = page.get("nextCursor")
            if not cursor:
                return out

    def get(self, id: str) -> Workload:
        return Workload.of(self._call("GET", f"/api/v1/workloads/{id}"), self)

    def wait(self, id: str, timeout: float = 1800, until=("Running", "Succeeded"), poll: float = 1.0) -> Workload:
        """Poll until the workload is in one of until; a failure, a stop or the
        timeout raises GantryError with what it saw."""
        deadline = time.monotonic() + timeout
        while True:
            w = self.get(id)
            if w.status in until:
                return w
            if w.status in ("Failed", "Deleted", "Stopped", "IdleStopped"):
                raise GantryError(409, f"workload {id} is {w.status}", w.reason)
            if time.monotonic() > deadline:
                raise GantryError(408, f"workload {id} still {w.status} after {timeout:g}s", w.reason)
            time.sleep(poll)

    def stop(self, id: str) -> Workload:
        return Workload.of(self._call("POST", f"/api/v1/workloads/{id}/stop"), self)

    def start(self, id: str) -> Workload:
        return Workload.of(self._call("POST", f"/api/v1/workloads/{id}/start"), self)

    def delete(self, id: str) -> None:
        self._call("DELETE", f"/api/v1/workloads/{id}")

    def keepalive(self, id: str) -> Workload:
        return Workload.of(self._call("POST", f"/api/v1/workloads/{id}/keepalive"), self)

    def approve(self, id: str, reason: str) -> Workload:
        return Workload.of(self._call("POST", f"/api/v1/workloads/{id}/approve", body={"reason": reason}), self)

    def deny(self, id: str, reason: str) -> Workload:
        return Workload.of(self._call("POST", f"/api/v1/workloads/{id}/deny", body={"reason": reason}), self)

    def events(self, id: str) -> List[Dict[str, Any]]:
        return self._call("GET", f"/api/v1/workloads/{id}/events")["items"]

    def logs(self, id: str, follow: bool = False, tail: Optional[int] = None) -> Iterator[str]:
        """The log's lines, as a generator; with follow, until the workload's
        pod ends or the caller stops iterating."""
        with self._open("GET", f"/api/v1/workloads/{id}/logs", {"follow": follow or None, "tailLines": tail}, stream=follow) as resp:
            for line in resp:
                yield line.decode(errors="replace").rstrip("\n")

    def metrics(self, id: str, series: Optional[List[str]] = None, since: Optional[str] = None,
                step: Optional[str] = None) -> Dict[str, Any]:
        """A workload's GPU series (getWorkloadMetrics): a dict with from, to, step and series."""
        return self._call("GET", f"/api/v1/workloads/{id}/metrics",
                          {"series": ",".join(series) if series else None, "from": since, "step": step})

    def advice(self, id: Optional[str] = None, team: Optional[str] = None) -> Any:
        """A workload's findings, or (no id) the open advice of the caller's teams."""
        if id:
            return self._call("GET", f"/api/v1/workloads/{id}/advice")
        return self._call("GET", "/api/v1/advice", {"team": team})

    def apply_advice(self, id: str, kind: Optional[str] = None) -> Dict[str, Any]:
        return self._call("POST", f"/api/v1/workloads/{id}/advice/apply", body={"kind": kind} if kind else {})

    def progress(self, id: str, since: Optional[str] = None, limit: Optional[int] = None) -> Dict[str, Any]:
        """A training run's progress (getWorkloadProgress): reported, step,
        totalSteps, fraction, stepsPerSecond, eta, metrics, series…"""
        return self._call("GET", f"/api/v1/workloads/{id}/progress", {"since": since, "limit": limit})

    def keep_run(self, id: str) -> Dict[str, Any]:
        """Keeps a training run going whatever its early-stopping rules say
        (keepRun): recorded; one a rule stopped is started again."""
        return self._call("POST", f"/api/v1/workloads/{id}/progress/keep")

    def trial(self, template: str, team: str, classes: List[str], steps: int, gpus: Optional[List[int]] = None,
              parameters: Optional[Dict[str, Any]] = None, max_runtime: Optional[str] = None,
              max_cost: Optional[float] = None, full_steps: Optional[int] = None,
              deadline: Optional[str] = None, idempotency_key: Optional[str] = None,
              mig_profiles: Optional[List[str]] = None) -> Dict[str, Any]:
        """Starts a trial (createTrial): a short run of the template per class and
        GPU count, and per class and MIG profile (one slice), each stopped at
        `steps`; read it with trial_results. A key per intended trial makes a
        retried call start one."""
        body = {"template": template, "team": team, "classes": classes, "steps": steps, "gpus": gpus,
                "migProfiles": mig_profiles,
                "parameters": parameters, "maxRuntime": max_runtime, "maxCost": max_cost,
                "fullSteps": full_steps, "deadline": deadline}
        return self._call("POST", "/api/v1/trials", body={k: v for k, v in body.items() if v is not None},
                          headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())})

    def trial_results(self, id: str) -> Dict[str, Any]:
        """A trial, measured (getTrial): each run's step time, throughput and
        scaling, the full run's time and cost, and the best choice (best, why)."""
        return self._call("GET", f"/api/v1/trials/{id}")

    def trials(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The trials of the teams the caller may read, newest first (listTrials)."""
        return self._call("GET", "/api/v1/trials", {"limit": limit})["items"]

    # -- money -------------------------------------------------------------

    def costs(self, group_by: str = "team", since: Optional[str] = None, until: Optional[str] = None) -> Dict[str, Any]:
        return self._call("GET", "/api/v1/costs", {"groupBy": group_by, "from": since, "to": until})

    def budgets(self, team: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/budgets", {"team": team})["items"]

    def team_report(self, team: str, month: Optional[str] = None) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/teams/{team}/report", {"month": month})

    def carbon_forecast(self, within: Optional[str] = None, runtime: Optional[str] = None) -> Dict[str, Any]:
        """The grid's carbon forecast at the cluster's site and the cleanest
        start of a run of runtime within the next within (getCarbonForecast):
        what a flexible template's launch would wait for."""
        return self._call("GET", "/api/v1/carbon/forecast", {"within": within, "runtime": runtime})

    def team_settings(self, team: str) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/teams/{team}/settings")

    def put_team_settings(self, team: str, templates: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
        return self._call("PUT", f"/api/v1/teams/{team}/settings", body={"templates": templates})

    # -- prices, quotas and budgets over the files (the platform team's) ------

    def platform_edits(self) -> List[Dict[str, Any]]:
        """The prices, quotas and budgets changed through the API, newest first."""
        return self._call("GET", "/api/v1/platform/edits")["items"]

    def set_price(self, gpu_class: str, on_demand: float, spot: Optional[float] = None) -> List[Dict[str, Any]]:
        return self._call("PUT", f"/api/v1/gpu-classes/{gpu_class}/price",
                          body={k: v for k, v in {"onDemand": on_demand, "spot": spot}.items() if v is not None})["items"]

    def reset_price(self, gpu_class: str) -> List[Dict[str, Any]]:
        return self._call("DELETE", f"/api/v1/gpu-classes/{gpu_class}/price")["items"]

    def set_quota(self, team: str, gpus: Dict[str, float], cohort: Optional[str] = None,
                  borrowing_limit: Optional[Dict[str, float]] = None, cores: Optional[float] = None) -> List[Dict[str, Any]]:
        """cores: what the team's CPU-only launches may ask for at once (None: no bound)."""
        body = {"gpus": gpus, "cohort": cohort, "borrowingLimit": borrowing_limit, "cores": cores}
        return self._call("PUT", f"/api/v1/teams/{team}/quota", body={k: v for k, v in body.items() if v is not None})["items"]

    def reset_quota(self, team: str) -> List[Dict[str, Any]]:
        return self._call("DELETE", f"/api/v1/teams/{team}/quota")["items"]

    def set_budget(self, team: str, amount: float, **budget: Any) -> List[Dict[str, Any]]:
        """budget: period, anchor, alerts, atLimit, costCenters as the API names them."""
        return self._call("PUT", f"/api/v1/teams/{team}/budget", body={"amount": amount, **budget})["items"]

    def reset_budget(self, team: str) -> List[Dict[str, Any]]:
        return self._call("DELETE", f"/api/v1/teams/{team}/budget")["items"]

    # -- catalog -------------------------------------------------------------

    def templates(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/templates")["items"]

    def template(self, name: str, version: Optional[int] = None) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/templates/{name}", {"version": version})

    def create_template(self, document: Dict[str, Any]) -> Dict[str, Any]:
        return self._call("POST", "/api/v1/templates", body=document)

    def update_template(self, name: str, document: Dict[str, Any], from_version: Optional[int] = None) -> Dict[str, Any]:
        """A new version of the template; with from_version (the version the
        document was edited from), only if that is still the live one (a 412
        GantryError otherwise)."""
        return self._call("PUT", f"/api/v1/templates/{name}", body=document, headers=_if_match(from_version))

    def apply_templates(self, files: Dict[str, str], prune: bool = False, dry_run: bool = False,
                        expect: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
        """Apply a set of template files ({path: content}) at once, as
        `gantry templates apply` does: validated, planned, all or nothing;
        with expect ({name: version}, 0 for none), only if each named
        template is still at that version."""
        body: Dict[str, Any] = {"files": [{"path": p, "content": c} for p, c in files.items()], "prune": prune, "dryRun": dry_run}
        if expect is not None:
            body["expect"] = expect
        return self._call("POST", "/api/v1/catalog/apply", body=body)

    def delete_template(self, name: str, from_version: Optional[int] = None) -> None:
        self._call("DELETE", f"/api/v1/templates/{name}", headers=_if_match(from_version))

    def template_versions(self, name: str) -> List[Dict[str, Any]]:
        return self._call("GET", f"/api/v1/templates/{name}/versions")["items"]

    def set_template_version_status(self, name: str, version: int, status: str, reason: str = "") -> Dict[str, Any]:
        return self._call("PUT", f"/api/v1/templates/{name}/versions/{version}/status", body={"status": status, "reason": reason})

    def template_advice(self, name: str) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/templates/{name}/advice")

    def render(self, name: str, team: str, gpu: Optional[str] = None, count: Optional[int] = None,
               mig: Optional[str] = None, parameters: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        body = _launch_body(name, team, gpu, count, mig, parameters, None)
        body.pop("template")
        return self._call("POST", f"/api/v1/templates/{name}/render", body=body)

    def gpu_classes(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/gpu-classes")["items"]

    def gpu_class(self, name: str) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/gpu-classes/{name}")

    def images(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/images")["items"]

    def image(self, name: str) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/images/{name}")

    def verify_image(self, name: str, tag: str) -> Dict[str, Any]:
        return self._call("POST", f"/api/v1/images/{name}/verify", body={"tag": tag})

    # -- the platform --------------------------------------------------------

    def nodes(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/nodes")["items"]

    def node(self, name: str) -> Dict[str, Any]:
        return self._call("GET", f"/api/v1/nodes/{name}")

    def node_groups(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/node-groups")["items"]

    def clusters(self) -> List[Dict[str, Any]]:
        """The worker clusters, with their prices and, once read, what each has free."""
        return self._call("GET", "/api/v1/clusters")["items"]

    def cordon_cluster(self, name: str) -> List[Dict[str, Any]]:
        """The worker cluster gets no new work until uncordoned."""
        return self._call("PUT", f"/api/v1/clusters/{name}/cordon")["items"]

    def drain_cluster(self, name: str) -> List[Dict[str, Any]]:
        """Cordons the worker cluster and moves the Jobs that run there to other clusters."""
        return self._call("PUT", f"/api/v1/clusters/{name}/drain")["items"]

    def uncordon_cluster(self, name: str) -> List[Dict[str, Any]]:
        return self._call("DELETE", f"/api/v1/clusters/{name}/cordon")["items"]

    def set_node_group(self, name: str, **change: Any) -> List[Dict[str, Any]]:
        """change: max, pricePerNodeHour, bootTimeSeconds, quietTimeSeconds, warmPerDay as the API names them;
        what is left out stays as the node group file has it."""
        return self._call("PUT", f"/api/v1/node-groups/{name}", body=change)["items"]

    def reset_node_group(self, name: str) -> List[Dict[str, Any]]:
        return self._call("DELETE", f"/api/v1/node-groups/{name}")["items"]

    def capacity_forecast(self, gpu_class: str, horizon_minutes: int = 120, step_minutes: int = 10) -> Dict[str, Any]:
        return self._call("GET", "/api/v1/capacity/forecast",
                          {"class": gpu_class, "horizonMinutes": horizon_minutes, "stepMinutes": step_minutes})

    def reserved_advice(self, gpu_class: str, share: float = 0.9) -> Dict[str, Any]:
        return self._call("GET", "/api/v1/capacity/reserved", {"class": gpu_class, "share": share})

    def audit(self, **filters: Any) -> Dict[str, Any]:
        return self._call("GET", "/api/v1/audit", filters)

    def users(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/users")["items"]

    def deactivate_user(self, user: str) -> Dict[str, Any]:
        return self._call("POST", f"/api/v1/users/{user}/deactivate")

    def reactivate_user(self, user: str) -> Dict[str, Any]:
        return self._call("POST", f"/api/v1/users/{user}/reactivate")

    def user_tokens(self, user: str) -> List[Dict[str, Any]]:
        return self._call("GET", f"/api/v1/users/{user}/tokens")["items"]

    def revoke_user_token(self, user: str, id: str) -> None:
        self._call("DELETE", f"/api/v1/users/{user}/tokens/{id}")

    # -- me and my tokens ------------------------------------------------------

    def me(self) -> Dict[str, Any]:
        return self._call("GET", "/api/v1/me")

    def tokens(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/api/v1/tokens")["items"]

    def create_token(self, name: str, days: int = 30, team: Optional[str] = None, read_only: bool = False) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": name, "expiresInDays": days}
        if team:
            body["team"] = team
        if read_only:
            body["readOnly"] = True
        return self._call("POST", "/api/v1/tokens", body=body)

    def revoke_token(self, id: str) -> None:
        self._call("DELETE", f"/api/v1/tokens/{id}")

    # -- operations --------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        return self._call("GET", "/healthz")

    def ready(self) -> Dict[str, Any]:
        try:
            return self._call("GET", "/readyz")
        except GantryError as e:
            if e.status == 503:
                return {"status": "unavailable", "detail": e.detail}
            raise

    def auth_config(self) -> Dict[str, Any]:
        return self._call("GET", "/auth/config")

    def gantry_metrics(self) -> str:
        """Gantry's own Prometheus metrics, as text."""
        return self._call("GET", "/metrics")


# The client's method for each operation of openapi.yaml.
METHODS = {
    "getWorkloadProgress": "progress",
    "keepRun": "keep_run",
    "createTrial": "trial", "getTrial": "trial_results", "listTrials": "trials",
    "getHealth": "health", "getGantryMetrics": "gantry_metrics", "getReady": "ready", "getAuthConfig": "auth_config",
    "listTemplates": "templates", "createTemplate": "create_template", "getTemplate": "template",
    "updateTemplate": "update_template", "deleteTemplate": "delete_template", "applyTemplates": "apply_templates", "listTemplateVersions": "template_versions",
    "setTemplateVersionStatus": "set_template_version_status", "getTemplateAdvice": "template_advice",
    "renderTemplate": "render", "listGPUClasses": "gpu_classes", "getGPUClass": "gpu_class",
    "listWorkloads": "workloads", "createWorkload": "launch", "estimateWorkload": "estimate", "getWorkload": "get",
    "deleteWorkload": "delete", "stopWorkload": "stop", "keepWorkloadAlive": "keepalive", "approveWorkload": "approve",
    "denyWorkload": "deny", "startWorkload": "start", "listWorkloadEvents": "events", "getWorkloadLogs": "logs",
    "getWorkloadMetrics": "metrics", "getWorkloadAdvice": "advice", "applyWorkloadAdvice": "apply_advice",
    "getCosts": "costs", "getTeamSettings": "team_settings", "putTeamSettings": "put_team_settings",
    "listPlatformEdits": "platform_edits", "setGPUClassPrice": "set_price", "resetGPUClassPrice": "reset_price",
    "setTeamQuota": "set_quota", "resetTeamQuota": "reset_quota", "setTeamBudget": "set_budget", "resetTeamBudget": "reset_budget",
    "getTeamReport": "team_report", "getCarbonForecast": "carbon_forecast", "listBudgets": "budgets", "listAdvice": "advice", "listNodes": "nodes",
    "getNode": "node", "listNodeGroups": "node_groups", "setNodeGroup": "set_node_group", "resetNodeGroup": "reset_node_group", "listClusters": "clusters", "cordonCluster": "cordon_cluster", "drainCluster": "drain_cluster", "uncordonCluster": "uncordon_cluster",
    "getCapacityForecast": "capacity_forecast", "getReservedAdvice": "reserved_advice", "getMe": "me", "listTokens": "tokens", "createToken": "create_token", "revokeToken": "revoke_token",
    "listUsers": "users", "deactivateUser": "deactivate_user", "reactivateUser": "reactivate_user",
    "listUserTokens": "user_tokens", "revokeUserToken": "revoke_user_token", "listImages": "images",
    "getImage": "image", "verifyImage": "verify_image", "listAudit": "audit",
}


def _launch_body(template, team, gpu, count, mig, parameters, version, cpu_only=False) -> Dict[str, Any]:
    body: Dict[str, Any] = {"template": template, "team": team}
    g: Dict[str, Any] = {}
    if gpu:
        g["class"] = gpu
    if count:
        g["count"] = count
    if mig:
        g["migProfile"] = mig
    if g:
        body["gpu"] = g
    if parameters:
        body["parameters"] = parameters
    if version:
        body["templateVersion"] = version
    if cpu_only:
        body["cpuOnly"] = True
    return body


def _if_match(version: Optional[int]) -> Optional[Dict[str, str]]:
    return None if version is None else {"If-Match": f'"v{version}"'}


def _retry_after(header: Optional[str], attempt: int) -> float:
    try:
        return min(float(header), 60.0)
    except (TypeError, ValueError):
        return min(0.5 * 2 ** attempt, 30.0)


def _problem(e: urllib.error.HTTPError) -> GantryError:
    try:
        p = json.loads(e.read() or b"{}")
    except ValueError:
        p = {}
    errors = [FieldError(x.get("field", ""), x.get("detail", "")) for x in p.get("errors", [])]
    return GantryError(e.code, p.get("title", e.reason), p.get("detail", ""), errors)
