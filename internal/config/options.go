package config

//go:generate go run ./gendoc ../../docs/configuration.md

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written as Go writes durations ("15s", "8h").
// A value that is not one is an error where it was read (file:line, the
// variable or the flag).
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler (files, variables, flags).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s, 15m or 8h", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler (printed configuration).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string { return time.Duration(d).String() }

// option is one configuration setting: its YAML key, its environment
// variable, its command-line flag (of gantry serve; "" for none), what it
// means, and where it lives in a Config. The table below is the only place
// settings are declared: Load, the flags and docs/configuration.md all come
// from it.
type option struct {
	key, env, flag string
	doc            string
	defaultDoc     string // the default as documented, where it is not a constant
	field          func(*Config) any
}

var options = []option{
	{key: "listen", env: "GANTRY_LISTEN", flag: "listen", field: func(c *Config) any { return &c.Listen },
		doc: "address to listen on; loopback only unless `oidc.issuer` is set"},
	{key: "publicURL", env: "GANTRY_PUBLIC_URL", field: func(c *Config) any { return &c.PublicURL },
		doc: "how browsers reach Gantry; sign-in redirects come back to it, and an https URL makes cookies Secure", defaultDoc: "`http://` + the listen address"},
	{key: "database.driver", env: "GANTRY_DATABASE_DRIVER", flag: "db-driver", field: func(c *Config) any { return &c.Database.Driver },
		doc: "`sqlite` (one replica) or `postgres` (several)"},
	{key: "database.dsn", env: "GANTRY_DATABASE_DSN", flag: "db", field: func(c *Config) any { return &c.Database.DSN },
		doc: "SQLite file or PostgreSQL URL (never logged)", defaultDoc: "`~/.local/share/gantry/gantry.db`"},
	{key: "log.level", env: "GANTRY_LOG_LEVEL", flag: "log-level", field: func(c *Config) any { return &c.Log.Level },
		doc: "`debug`, `info`, `warn` or `error`"},
	{key: "log.format", env: "GANTRY_LOG_FORMAT", field: func(c *Config) any { return &c.Log.Format },
		doc: "`text` or `json`"},
	{key: "kubeconfig", env: "GANTRY_KUBECONFIG", flag: "kubeconfig", field: func(c *Config) any { return &c.Kubeconfig },
		doc: "the cluster workloads are applied to: a kubeconfig file, or `in-cluster` for the pod's ServiceAccount (the Helm chart); none: launches are recorded and rendered, not applied (`gantry dev` sets it)"},
	{key: "capacityInformers", env: "GANTRY_CAPACITY_INFORMERS", field: func(c *Config) any { return &c.CapacityInformers },
		doc: "keep informers on the GPU nodes and their running pods on every replica, which each launch's check and estimate read; false: each launch lists the class's nodes and their pods instead (for many Gantry servers on one cluster, as the test suite runs)"},
	{key: "namespace", env: "GANTRY_NAMESPACE", field: func(c *Config) any { return &c.Namespace },
		doc: "Gantry's own namespace, where its replicas' Lease lives"},
	{key: "leaseDuration", env: "GANTRY_LEASE_DURATION", field: func(c *Config) any { return &c.LeaseDuration },
		doc: "how long replicas wait for a leader that stopped renewing its Lease before one takes over (2s to 5m)"},
	{key: "reconcileInterval", env: "GANTRY_RECONCILE_INTERVAL", field: func(c *Config) any { return &c.ReconcileInterval },
		doc: "how often the lifecycle loop runs: apply launches not yet applied, converge stopped, started and deleted workloads, stop those past their max runtime (1s to 24h); with worker clusters, their loops run at least as often (reading the workers, else every 10s; dispatching, 5s; VMs, 2s)"},
	{key: "logDrain", env: "GANTRY_LOG_DRAIN", field: func(c *Config) any { return &c.LogDrain },
		doc: "how long a followed log keeps reading after its workload has ended, for what its containers print while they shut down (Kubernetes' default grace period is 30s; 1s to 5m)"},
	{key: "removeOrphans", env: "GANTRY_REMOVE_ORPHANS", field: func(c *Config) any { return &c.RemoveOrphans },
		doc: "delete objects with Gantry's labels that belong to no workload (otherwise they are only reported)"},
	{key: "appDial", env: "GANTRY_APP_DIAL", field: func(c *Config) any { return &c.AppDial },
		doc: "how /w/{id}/ reaches a notebook's or service's app: `dns`, its Service's cluster DNS name (carried by kube-proxy: Gantry in a pod of the cluster) or `endpoints`, the Service's ready endpoints read from the API server and dialled by Gantry itself (a cluster without DNS or kube-proxy, or Gantry outside the cluster on a host that routes to its pods' addresses); needs kubeconfig"},
	{key: "namespacePrefix", env: "GANTRY_NAMESPACE_PREFIX", field: func(c *Config) any { return &c.NamespacePrefix },
		doc: "team `vision` → namespace `gantry-vision`"},
	{key: "templatesDir", env: "GANTRY_TEMPLATES_DIR", field: func(c *Config) any { return &c.TemplatesDir },
		doc: "the initial template catalog, loaded into an empty database (relative or absolute)"},
	{key: "gpuClassesFile", env: "GANTRY_GPU_CLASSES_FILE", field: func(c *Config) any { return &c.GPUClassesFile },
		doc: "GPU classes, MIG profiles and prices"},
	{key: "nodeGroupsFile", env: "GANTRY_NODE_GROUPS_FILE", field: func(c *Config) any { return &c.NodeGroupsFile },
		doc: "each GPU class's node groups: min/max nodes, GPUs per node, price per node-hour, reserved/on-demand/spot, boot and quiet time (docs/capacity.md); empty: none, launches are not checked against a class's most nodes"},
	{key: "clustersFile", env: "GANTRY_CLUSTERS_FILE", field: func(c *Config) any { return &c.ClustersFile },
		doc: "the worker clusters: region, provider, credentials, GPU classes offered and their prices, labels such as data residency, per-team caps, placement rules (docs/fleets.md); empty: Gantry drives one cluster"},
	{key: "policyDir", env: "GANTRY_POLICY_DIR", field: func(c *Config) any { return &c.PolicyDir },
		doc: "`model.conf`, `roles.csv` and `bindings.yaml`; reloaded when they change"},
	{key: "images.dir", env: "GANTRY_IMAGES_DIR", field: func(c *Config) any { return &c.Images.Dir },
		doc: "the approved image catalog and its keys; reloaded when it changes"},
	{key: "images.registryAuthFile", env: "GANTRY_IMAGES_REGISTRY_AUTH_FILE", field: func(c *Config) any { return &c.Images.RegistryAuthFile },
		doc: "registry credentials: a docker `config.json` or a pull secret's `.dockerconfigjson`", defaultDoc: "none (anonymous)"},
	{key: "images.cacheTTL", env: "GANTRY_IMAGES_CACHE_TTL", field: func(c *Config) any { return &c.Images.CacheTTL },
		doc: "how long a verified digest stays verified (0s to 24h)"},
	{key: "images.mirrors", field: func(c *Config) any { return &c.Images.Mirrors },
		doc: "catalog registry host → host to fetch from, over HTTPS (plain HTTP only for localhost, *.local and private addresses, as for any registry); `http://host` for plain HTTP", defaultDoc: "none"},
	{key: "images.devRegistry", env: "GANTRY_IMAGES_DEV_REGISTRY", field: func(c *Config) any { return &c.Images.DevRegistry },
		doc: "a local registry with signed stand-ins for the catalog (`gantry dev`, `make serve`; `-tags dev` builds only; refused with `oidc.issuer`)"},
	{key: "confidential.kbsURL", env: "GANTRY_CONFIDENTIAL_KBS_URL", field: func(c *Config) any { return &c.Confidential.KBSURL },
		doc: "the key broker confidential pods attest to; none: confidential launches are refused", defaultDoc: "none"},
	{key: "runs.reportURL", env: "GANTRY_RUNS_REPORT_URL", field: func(c *Config) any { return &c.Runs.ReportURL },
		doc: "how training Jobs' pods reach Gantry to report their progress (its in-cluster Service, say)", defaultDoc: "`publicURL` unless it is a loopback address; else runs do not report"},
	{key: "maxBodyBytes", env: "GANTRY_MAX_BODY_BYTES", field: func(c *Config) any { return &c.MaxBodyBytes },
		doc: "largest request body (1024 to 67108864)"},
	{key: "maxConcurrentReads", env: "GANTRY_MAX_CONCURRENT_READS", field: func(c *Config) any { return &c.MaxConcurrentReads },
		doc: "how many API reads the database alone answers run at a time, the rest waiting their turn in arrival order (0 to 4096)", defaultDoc: "0: two per CPU"},
	{key: "sessionLifetime", env: "GANTRY_SESSION_LIFETIME", field: func(c *Config) any { return &c.SessionLifetime },
		doc: "how long a browser stays signed in (1m to 720h)"},
	{key: "maxGroupAge", env: "GANTRY_MAX_GROUP_AGE", field: func(c *Config) any { return &c.MaxGroupAge },
		doc: "how long a token or browser session may act with groups the identity provider has not confirmed (every sign-in and provider token refreshes them); past it, the user signs in again (1m to 8784h)"},
	{key: "oidc.issuer", env: "GANTRY_OIDC_ISSUER", field: func(c *Config) any { return &c.OIDC.Issuer },
		doc: "the OpenID provider; none: the development provider runs in-process (`-tags dev` builds, loopback only)", defaultDoc: "none"},
	{key: "oidc.clientID", env: "GANTRY_OIDC_CLIENT_ID", field: func(c *Config) any { return &c.OIDC.ClientID },
		doc: "the portal's client (code flow with PKCE); required with `oidc.issuer`", defaultDoc: "none"},
	{key: "oidc.clientSecret", env: "GANTRY_OIDC_CLIENT_SECRET", field: func(c *Config) any { return &c.OIDC.ClientSecret },
		doc: "the portal client's secret (never logged); empty for a public client", defaultDoc: "none"},
	{key: "oidc.cliClientID", env: "GANTRY_OIDC_CLI_CLIENT_ID", field: func(c *Config) any { return &c.OIDC.CLIClientID },
		doc: "the CLI's public client (device grant)", defaultDoc: "none"},
	{key: "oidc.audiences", env: "GANTRY_OIDC_AUDIENCES", field: func(c *Config) any { return &c.OIDC.Audiences },
		doc: "client ids whose tokens the API accepts (comma-separated in the variable)", defaultDoc: "the portal's and the CLI's client ids"},
	{key: "oidc.scopes", env: "GANTRY_OIDC_SCOPES", field: func(c *Config) any { return &c.OIDC.Scopes },
		doc:        "scopes asked for at sign-in, by the portal and the CLI (comma-separated in the variable)",
		defaultDoc: "`openid profile email`, with `groups` where the provider's discovery lists it (Dex sends groups only when asked), and for the CLI `offline_access` where listed (its refresh token); a provider that lists none gets the three"},
	{key: "oidc.clockSkew", env: "GANTRY_OIDC_CLOCK_SKEW", field: func(c *Config) any { return &c.OIDC.ClockSkew },
		doc: "allowed clock difference with the provider (0s to 5m)"},
	{key: "oidc.subjectClaim", field: func(c *Config) any { return &c.OIDC.SubjectClaim }, doc: "claim naming the user", defaultDoc: "`sub`"},
	{key: "oidc.emailClaim", field: func(c *Config) any { return &c.OIDC.EmailClaim }, doc: "claim with the e-mail address", defaultDoc: "`email`"},
	{key: "oidc.nameClaim", field: func(c *Config) any { return &c.OIDC.NameClaim }, doc: "claim with the display name", defaultDoc: "`name`"},
	{key: "oidc.secondFactorAMR", env: "GANTRY_OIDC_SECOND_FACTOR_AMR", field: func(c *Config) any { return &c.OIDC.SecondFactorAMR },
		doc: "`amr` methods (RFC 8176) that show a second factor was used at sign-in; roles the policy marks (`secondFactor:` in bindings.yaml) need one", defaultDoc: "`mfa`, `otp`, `hwk`"},
	{key: "oidc.secondFactorACR", env: "GANTRY_OIDC_SECOND_FACTOR_ACR", field: func(c *Config) any { return &c.OIDC.SecondFactorACR },
		doc: "`acr` values that show a second factor (Keycloak: the level of authentication you configured, e.g. `2`; Entra ID: none, it sends `amr`)", defaultDoc: "none"},
	{key: "oidc.acrValues", env: "GANTRY_OIDC_ACR_VALUES", field: func(c *Config) any { return &c.OIDC.ACRValues },
		doc: "`acr_values` a sign-in asks for when the person needs a second factor (with `prompt=login`); empty: only `prompt=login`", defaultDoc: "none"},
	{key: "oidc.groupsClaim", field: func(c *Config) any { return &c.OIDC.GroupsClaim }, doc: "claim with the groups `policy/bindings.yaml` binds", defaultDoc: "`groups`"},
	{key: "audit.checkpointKey", env: "GANTRY_AUDIT_CHECKPOINT_KEY", field: func(c *Config) any { return &c.Audit.CheckpointKey },
		doc: "ed25519 private key (PEM, PKCS #8; `gantry audit keygen`) that signs checkpoints of the audit log's head; a file or mounted Secret not readable by every user, never in the database. None: no checkpoints, and a rewrite by whoever can write the database goes unnoticed", defaultDoc: "none (`-tags dev` builds: a development key in the data directory)"},
	{key: "audit.checkpointInterval", env: "GANTRY_AUDIT_CHECKPOINT_INTERVAL", field: func(c *Config) any { return &c.Audit.CheckpointInterval },
		doc: "how often the audit log's head is signed when it has moved, and so how many of the newest records can be deleted undetected (1s to 24h); each checkpoint goes to the log at level info (message `audit checkpoint`), to `audit.checkpointFile` and to the database"},
	{key: "audit.checkpointFile", env: "GANTRY_AUDIT_CHECKPOINT_FILE", field: func(c *Config) any { return &c.Audit.CheckpointFile },
		doc: "file every checkpoint is appended to as a JSON line (created 0600), for `gantry audit verify --checkpoints`; keep it append-only and away from the database's writers", defaultDoc: "none"},
	{key: "audit.denialWindow", env: "GANTRY_AUDIT_DENIAL_WINDOW", field: func(c *Config) any { return &c.Audit.DenialWindow },
		doc: "how long repeated denials are counted rather than written: the first of each kind (same source, actor, route and status) in a window is recorded in full, the rest as one summary record with their count when the window closes (1s to 24h)"},
	{key: "security.anonymousRate", env: "GANTRY_SECURITY_ANONYMOUS_RATE", field: func(c *Config) any { return &c.Security.AnonymousRate },
		doc: "requests per second one source address (an IPv6 /64) may send to the API and to `/w/` without valid credentials; past it they are answered 429 before any authentication work, while valid credentials from the same address still work. 0: no limit"},
	{key: "security.anonymousBurst", env: "GANTRY_SECURITY_ANONYMOUS_BURST", field: func(c *Config) any { return &c.Security.AnonymousBurst },
		doc: "how many requests without valid credentials one source may send at once before `security.anonymousRate` applies (1 to 1000000)"},
	{key: "security.trustedProxies", env: "GANTRY_SECURITY_TRUSTED_PROXIES", field: func(c *Config) any { return &c.Security.TrustedProxies },
		doc: "addresses or CIDR prefixes of the proxies in front of Gantry (a load balancer, the Ingress controller's pods): from these peers the client is the right-most `X-Forwarded-For` address that is not one of them, for the rate limits, the sign-in limit and the audit log's source (comma-separated in the variable)", defaultDoc: "none: the peer is the client"},
	{key: "tls.certFile", env: "GANTRY_TLS_CERT_FILE", field: func(c *Config) any { return &c.TLS.CertFile },
		doc: "PEM certificate (chain) Gantry serves HTTPS with, with `tls.keyFile`; refused at start when expired; read again when the files change (a rotated pair that is bad or expired is refused and the one in force stays)", defaultDoc: "none: plain HTTP"},
	{key: "tls.keyFile", env: "GANTRY_TLS_KEY_FILE", field: func(c *Config) any { return &c.TLS.KeyFile },
		doc: "the PEM private key of `tls.certFile`", defaultDoc: "none"},
	{key: "tls.minVersion", env: "GANTRY_TLS_MIN_VERSION", field: func(c *Config) any { return &c.TLS.MinVersion },
		doc: "the oldest TLS version a client may use: `1.2` or `1.3`"},
	{key: "security.streamsPerIdentity", env: "GANTRY_SECURITY_STREAMS_PER_IDENTITY", field: func(c *Config) any { return &c.Security.StreamsPerIdentity },
		doc: "long-lived responses one person may hold open on one replica at once — workload watch streams, followed logs, websockets to notebooks; past it they are answered 429 with Retry-After (1 to 1000000)"},
	{key: "security.streamsPerReplica", env: "GANTRY_SECURITY_STREAMS_PER_REPLICA", field: func(c *Config) any { return &c.Security.StreamsPerReplica },
		doc: "long-lived responses one replica holds open at once, everyone's together; past it they are answered 429 with Retry-After (1 to 1000000)"},
	{key: "telemetry.rawRetention", env: "GANTRY_TELEMETRY_RAW_RETENTION", field: func(c *Config) any { return &c.Telemetry.RawRetention },
		doc: "how long raw GPU samples are kept (1h to 720h); workload series within it are exact"},
	{key: "telemetry.rollupRetention", env: "GANTRY_TELEMETRY_ROLLUP_RETENTION", field: func(c *Config) any { return &c.Telemetry.RollupRetention },
		doc: "how long the one-minute and one-hour rollups (mean, max, p95) are kept"},
	{key: "telemetry.audience", env: "GANTRY_TELEMETRY_AUDIENCE", field: func(c *Config) any { return &c.Telemetry.Audience },
		doc: "the audience gantry-agent's projected ServiceAccount token must be meant for (checked with a TokenReview)"},
	{key: "telemetry.serviceAccount", env: "GANTRY_TELEMETRY_SERVICE_ACCOUNT", field: func(c *Config) any { return &c.Telemetry.ServiceAccount },
		doc: "the only ServiceAccount that may push telemetry, and only for the node its pod runs on"},
	{key: "telemetry.quarantine", env: "GANTRY_TELEMETRY_QUARANTINE", field: func(c *Config) any { return &c.Telemetry.Quarantine },
		doc: "what a GPU turning unhealthy (a critical XID, a double-bit ECC error, a failed row remapping) does to its node: tainted `gantry.dev/gpu-quarantine` with this effect, `NoSchedule` or `NoExecute`, and labelled `gantry.dev/gpu-unhealthy=true`; `off`: nothing (docs/faults.md)"},
	{key: "telemetry.move", env: "GANTRY_TELEMETRY_MOVE", field: func(c *Config) any { return &c.Telemetry.Move },
		doc: "move the work off an unhealthy GPU of a quarantined node: a Job requeued through Kueue, a notebook's or service's pod evicted, a VM restarted — unless a volume only that node reaches would be left behind"},
	{key: "telemetry.quarantineClean", env: "GANTRY_TELEMETRY_QUARANTINE_CLEAN", field: func(c *Config) any { return &c.Telemetry.QuarantineClean },
		doc: "how long every GPU of a quarantined node must be healthy, its agent reporting, before the preflight check runs there and, once it passes, Gantry removes its taint (1m to 168h)"},
	{key: "telemetry.preflightImage", env: "GANTRY_TELEMETRY_PREFLIGHT_IMAGE", field: func(c *Config) any { return &c.Telemetry.PreflightImage },
		doc: "the image of the preflight check, a Job on the quarantined node (gantry-agent's)"},
	{key: "telemetry.preflightCommand", env: "GANTRY_TELEMETRY_PREFLIGHT_COMMAND", field: func(c *Config) any { return &c.Telemetry.PreflightCommand },
		doc: "its command: `gantry-agent check` reads every GPU through NVML and fails on one that is unhealthy"},
	{key: "telemetry.preflightRuntimeClass", env: "GANTRY_TELEMETRY_PREFLIGHT_RUNTIME_CLASS", field: func(c *Config) any { return &c.Telemetry.PreflightRuntimeClass },
		doc: "the RuntimeClass that gives the check the node's GPUs (the agent's, `nvidia`); empty: none"},
	{key: "telemetry.xidHold", env: "GANTRY_TELEMETRY_XID_HOLD", field: func(c *Config) any { return &c.Telemetry.XIDHold },
		doc: "how long a critical XID keeps a GPU unhealthy without another one (1m to 720h)"},
	{key: "energy.pue", env: "GANTRY_ENERGY_PUE", field: func(c *Config) any { return &c.Energy.PUE },
		doc: "the power usage effectiveness of the site of the cluster Gantry drives (1 to 3): showback's facility kWh are its GPUs' kWh times this (worker clusters state theirs in the clusters file, `pue`)"},
	{key: "energy.location", env: "GANTRY_ENERGY_LOCATION", field: func(c *Config) any { return &c.Energy.Location },
		doc: "where the cluster Gantry drives draws its power, as the carbon source names it (a site of `energy.carbonProfiles`, or a Carbon Aware SDK location such as `westus`); worker clusters are rated at their `region`"},
	{key: "energy.carbonProfiles", env: "GANTRY_ENERGY_CARBON_PROFILES", field: func(c *Config) any { return &c.Energy.CarbonProfiles },
		doc: "a file of static hourly grid carbon intensities per site (gCO2e/kWh, 24 a site, UTC; docs/energy.md); showback then gives kg CO2e"},
	{key: "energy.carbonSDK", env: "GANTRY_ENERGY_CARBON_SDK", field: func(c *Config) any { return &c.Energy.CarbonSDK },
		doc: "the base URL of a Carbon Aware SDK Web API (`/emissions/bylocation`), asked for the intensities instead of the profiles, cached by location and hour"},
	{key: "quota.kueue", env: "GANTRY_QUOTA_KUEUE", field: func(c *Config) any { return &c.Quota.Kueue },
		doc: "Kueue admits workloads against the policy's quotas: Gantry keeps its ResourceFlavors, ClusterQueues, LocalQueues and WorkloadPriorityClasses in sync and creates workloads queued (false: a cluster without Kueue; quotas are not enforced)"},
	{key: "quota.kueueNamespace", env: "GANTRY_QUOTA_KUEUE_NAMESPACE", field: func(c *Config) any { return &c.Quota.KueueNamespace },
		doc: "Kueue's namespace; with `clustersFile`, where Gantry writes each worker's kubeconfig as a Secret (`gantry-worker-NAME`) for MultiKueue"},
	{key: "notify.webhookURL", env: "GANTRY_NOTIFY_WEBHOOK_URL", field: func(c *Config) any { return &c.Notify.WebhookURL },
		doc: "where budget alerts are posted (Slack-compatible JSON, signed; retried with backoff)", defaultDoc: "none (alerts reach the audit log and the budget banner only)"},
	{key: "notify.webhookSecret", env: "GANTRY_NOTIFY_WEBHOOK_SECRET", field: func(c *Config) any { return &c.Notify.WebhookSecret },
		doc: "the HMAC-SHA256 key of the webhook's `X-Gantry-Signature: sha256=<hex of HMAC(timestamp + \".\" + delivery id + \".\" + body)>` (at least 16 bytes; required with a URL)", defaultDoc: "none"},
	{key: "metrics.prometheusURL", env: "GANTRY_METRICS_PROMETHEUS_URL", field: func(c *Config) any { return &c.Metrics.PrometheusURL },
		doc: "read workloads' GPU series with PromQL from this Prometheus (which scrapes dcgm-exporter or gantry-agent) instead of Gantry's own store", defaultDoc: "none (Gantry's store)"},
	{key: "devLogin.listen", env: "GANTRY_DEV_LOGIN_LISTEN", field: func(c *Config) any { return &c.DevLogin.Listen },
		doc: "where the development provider listens (loopback; port 0: any free one)"},
	{key: "devLogin.users", field: func(c *Config) any { return &c.DevLogin.Users },
		doc: "the development provider's users (username, password, name, email, groups)", defaultDoc: "alice, lee, pat, ada and vic (README)"},
}

// set parses v into the field at p, by the field's type.
func set(p any, v string) error {
	switch f := p.(type) {
	case *string:
		*f = v
	case *Secret:
		*f = Secret(v)
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*f = b
	case *int64:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*f = n
	case *float64:
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		*f = x
	case *Duration:
		return f.UnmarshalText([]byte(v))
	case *[]string:
		*f = strings.Split(v, ",")
	default:
		return fmt.Errorf("cannot be set from text (%T)", p)
	}
	return nil
}

// Flags are command-line values by flag name (the table's flag column);
// empty values override nothing.
type Flags map[string]string

// FlagSet registers a flag for every option that has one and returns the
// Flags their values will be in after fs.Parse.
func FlagSet(fs *flag.FlagSet) func() Flags {
	vals := map[string]*string{}
	for _, o := range options {
		if o.flag != "" {
			vals[o.flag] = fs.String(o.flag, "", o.doc+" (also $"+o.env+")")
		}
	}
	return func() Flags {
		f := Flags{}
		for name, v := range vals {
			f[name] = *v
		}
		return f
	}
}

// Doc writes the options table as Markdown: key, variable, flag, default,
// meaning. docs/configuration.md is generated from it (go generate).
func Doc() string {
	var b strings.Builder
	b.WriteString("| key | environment | flag | default | what it is |\n|---|---|---|---|---|\n")
	def := Default()
	for _, o := range options {
		d := o.defaultDoc
		if t := defaultText(o.field(&def)); d == "" && t != "" {
			d = "`" + t + "`"
		} else if d == "" {
			d = "none"
		}
		cell := func(s, prefix string) string {
			if s == "" {
				return ""
			}
			return "`" + prefix + s + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", o.key, cell(o.env, ""), cell(o.flag, "--"), d, o.doc)
	}
	return b.String()
}

func defaultText(p any) string {
	switch f := p.(type) {
	case *string:
		return *f
	case *Secret:
		return string(*f)
	case *bool:
		return strconv.FormatBool(*f)
	case *int64:
		return strconv.FormatInt(*f, 10)
	case *float64:
		return strconv.FormatFloat(*f, 'g', -1, 64)
	case *Duration:
		return f.String()
	case *[]string:
		return strings.Join(*f, " ")
	}
	return fmt.Sprint(p)
}
