// Package config owns Gantry's configuration: one YAML file, then environment
// variables (GANTRY_*), then command-line flags, each overriding the one before,
// all declared once in one table (options.go) from which docs/configuration.md
// is generated. Durations are typed. Every problem is reported at start-up at
// once, with file:line for the file; secrets (the database connection string,
// the OIDC client secret) never print.
package config

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/logctx"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// Secret is a string that never appears in logs or printed configuration.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// LogValue keeps the secret out of slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON keeps the secret out of JSON output.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// Config is Gantry's configuration.
type Config struct {
	Listen         string   `json:"listen"`
	Database       Database `json:"database"`
	TemplatesDir   string   `json:"templatesDir"`
	GPUClassesFile string   `json:"gpuClassesFile"`
	// NodeGroupsFile declares each GPU class's node groups ("": none; the
	// cluster's nodes are whatever they are).
	NodeGroupsFile string `json:"nodeGroupsFile"`
	// ClustersFile lists the worker clusters ("": Gantry drives one).
	ClustersFile    string `json:"clustersFile"`
	NamespacePrefix string `json:"namespacePrefix"`
	MaxBodyBytes    int64  `json:"maxBodyBytes"`
	// MaxConcurrentReads is how many reads the database alone answers run
	// at a time, the rest waiting their turn; 0: two per CPU.
	MaxConcurrentReads int64 `json:"maxConcurrentReads"`
	Log                Log   `json:"log"`
	// PublicURL is how browsers reach Gantry (e.g. https://gantry.example.com);
	// sign-in redirects come back to it, and an https URL makes cookies Secure.
	// Default: http:// and the address Gantry listens on.
	PublicURL string `json:"publicURL"`
	// SessionLifetime is how long a browser stays signed in.
	SessionLifetime Duration `json:"sessionLifetime"`
	// MaxGroupAge bounds how old the groups a token or session acts with may be.
	MaxGroupAge Duration `json:"maxGroupAge"`
	// DevLogin is the development OpenID provider Gantry runs in-process when
	// oidc.issuer is empty (loopback only), with its users.
	DevLogin DevLogin `json:"devLogin"`
	// PolicyDir holds model.conf, roles.csv and bindings.yaml.
	PolicyDir string `json:"policyDir"`
	// Images configures the image catalog and verification.
	Images Images `json:"images"`
	// Confidential configures confidential launches.
	Confidential Confidential `json:"confidential"`
	Runs         Runs         `json:"runs"`
	// OIDC, when its issuer is set, authenticates every API request with a
	// bearer token from that provider (and the dev user is not used).
	OIDC OIDC `json:"oidc"`
	// Quota is how the policy's quotas are enforced.
	Quota Quota `json:"quota"`
	// Notify is where Gantry's webhooks (budget alerts) go.
	Notify Notify `json:"notify"`
	// Kubeconfig is the cluster workloads are applied to; without one, launches
	// are recorded and rendered but not applied.
	Kubeconfig string `json:"kubeconfig"`
	// CapacityInformers keeps informers on the GPU nodes and their live pods
	// on every replica, which launches' checks and estimates read; off, they
	// list them from the API server on every launch.
	CapacityInformers bool `json:"capacityInformers"`
	// ReconcileInterval is how often the lifecycle loop runs.
	ReconcileInterval Duration `json:"reconcileInterval"`
	// LogDrain is how long a followed log keeps reading after its workload
	// has ended: what its containers print while they shut down.
	LogDrain Duration `json:"logDrain"`
	// Namespace is Gantry's own namespace: its replicas' Lease is there.
	Namespace string `json:"namespace"`
	// LeaseDuration is how long replicas wait for a leader that stopped
	// renewing its Lease before one of them takes over.
	LeaseDuration Duration `json:"leaseDuration"`
	// RemoveOrphans deletes objects that carry Gantry's labels but belong to no
	// live workload; otherwise they are only reported.
	RemoveOrphans bool `json:"removeOrphans"`
	// AppDial is how /w/{id}/ reaches a workload's app on this cluster:
	// "dns" (default), its Service's cluster DNS name, which cluster DNS and
	// kube-proxy carry (Gantry in a pod of the cluster); "endpoints", the
	// Service's ready endpoints, which Gantry reads from the API server and
	// dials itself (a cluster without DNS or kube-proxy, or Gantry outside
	// the cluster on a host that routes to its pods' addresses).
	AppDial string `json:"appDial"`
	// Audit configures the signed checkpoints of the audit log.
	Audit Audit `json:"audit"`
	// Security bounds what callers without valid credentials can cost.
	Security Security `json:"security"`
	// TLS serves HTTPS from a certificate and key (reloaded when the files
	// change); none: plain HTTP (gantry dev, or behind a TLS proxy).
	TLS TLS `json:"tls"`
	// Telemetry configures GPU telemetry: what agents push, how long it is
	// kept, and GPU health.
	Telemetry Telemetry `json:"telemetry"`
	// Metrics chooses where workloads' series are read from.
	Metrics Metrics `json:"metrics"`
	// Energy says what showback's energy figures rest on.
	Energy Energy `json:"energy"`
}

// Energy configures energy reporting (docs/energy.md).
type Energy struct {
	// PUE is the power usage effectiveness of the site of the cluster
	// Gantry drives (worker clusters state theirs in the clusters file):
	// facility kWh = GPU kWh × PUE.
	PUE float64 `json:"pue"`
	// Location is where the cluster Gantry drives draws its power, as the
	// carbon source names it (a site of the profiles file, or a Carbon
	// Aware SDK location such as westus); worker clusters are at their
	// region. CarbonProfiles is a file of static hourly profiles per site;
	// CarbonSDK a Carbon Aware SDK Web API's base URL (used when set).
	// Neither: no carbon figures.
	Location       string `json:"location"`
	CarbonProfiles string `json:"carbonProfiles"`
	CarbonSDK      string `json:"carbonSDK"`
}

// Telemetry configures the GPU metrics gantry-agent pushes.
type Telemetry struct {
	// RawRetention keeps raw samples; RollupRetention keeps the one-minute
	// and one-hour rollups.
	RawRetention    Duration `json:"rawRetention"`
	RollupRetention Duration `json:"rollupRetention"`
	// Audience is what agents' projected ServiceAccount tokens must be
	// meant for; ServiceAccount is the only account that may push.
	Audience       string `json:"audience"`
	ServiceAccount string `json:"serviceAccount"`
	// Quarantine is what a GPU turning unhealthy does to its node (package
	// quarantine): a taint with this effect, NoSchedule or NoExecute, or
	// "off". Move moves the work off the failed GPU. QuarantineClean is how
	// long every GPU of a quarantined node must be healthy before its
	// preflight check runs (PreflightImage, with PreflightCommand, in the
	// RuntimeClass PreflightRuntimeClass) and, once that passes, Gantry
	// removes its taint.
	Quarantine            string   `json:"quarantine"`
	Move                  bool     `json:"move"`
	QuarantineClean       Duration `json:"quarantineClean"`
	PreflightImage        string   `json:"preflightImage"`
	PreflightCommand      []string `json:"preflightCommand"`
	PreflightRuntimeClass string   `json:"preflightRuntimeClass"`
	// XIDHold is how long a critical XID keeps a GPU unhealthy.
	XIDHold Duration `json:"xidHold"`
}

// Quota configures how quotas are enforced.
type Quota struct {
	// Kueue says that Kueue (sigs.k8s.io/kueue) runs in the cluster and
	// admits Gantry's workloads against the policy's quotas: Gantry keeps
	// its queues in sync and renders workloads queued.
	Kueue bool `json:"kueue"`
	// KueueNamespace is Kueue's namespace (MultiKueue reads the workers'
	// kubeconfigs from Secrets there).
	KueueNamespace string `json:"kueueNamespace"`
}

// Notify configures the outgoing webhook.
type Notify struct {
	// WebhookURL receives budget alerts as Slack-compatible JSON; "" keeps
	// them in the outbox (and the audit log and banner) only.
	WebhookURL Secret `json:"webhookURL"` // a credential (a Slack webhook's URL is): never logged
	// WebhookSecret signs every delivery (HMAC-SHA256, X-Gantry-Signature).
	WebhookSecret Secret `json:"webhookSecret"`
}

// Metrics chooses where workloads' GPU series are read from.
type Metrics struct {
	// PrometheusURL, when set, reads series from a Prometheus that scrapes
	// dcgm-exporter (or gantry-agent) instead of Gantry's own store.
	PrometheusURL string `json:"prometheusURL"`
}

// Security bounds what callers without valid credentials can cost.
type Security struct {
	// AnonymousRate is how many requests per second one source address may
	// send to the API without valid credentials (0: no limit).
	AnonymousRate int64 `json:"anonymousRate"`
	// AnonymousBurst is how many such requests it may send at once.
	AnonymousBurst int64 `json:"anonymousBurst"`
	// StreamsPerIdentity and StreamsPerReplica cap long-lived responses
	// (watch streams, followed logs, websockets to apps).
	StreamsPerIdentity int64 `json:"streamsPerIdentity"`
	StreamsPerReplica  int64 `json:"streamsPerReplica"`
	// TrustedProxies are the addresses or prefixes whose X-Forwarded-For
	// names the client (clientaddr.Behind).
	TrustedProxies []string `json:"trustedProxies"`
}

// Proxies are TrustedProxies as prefixes (an address is a prefix of its
// full length); the first that is neither is an error naming it.
func (s Security) Proxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range s.TrustedProxies {
		v = strings.TrimSpace(v)
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", v)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// TLS configures HTTPS.
type TLS struct {
	CertFile   string `json:"certFile"`
	KeyFile    string `json:"keyFile"`
	MinVersion string `json:"minVersion"` // "1.2" or "1.3"
}

// Audit configures signed checkpoints of the audit log's head, which make a
// rewrite by whoever can write the database detectable.
type Audit struct {
	// CheckpointKey is the ed25519 private key (PEM, PKCS #8) checkpoints are
	// signed with: a file or a mounted Secret, never in the database. None:
	// no checkpoints (a development key in -tags dev builds).
	CheckpointKey string `json:"checkpointKey"`
	// CheckpointInterval is how often the head is signed when it has moved.
	CheckpointInterval Duration `json:"checkpointInterval"`
	// CheckpointFile, when set, gets every checkpoint as a JSON line,
	// appended; every checkpoint also goes to the log.
	CheckpointFile string `json:"checkpointFile"`
	// DenialWindow is how long repeated denials of one kind are counted
	// before one record sums them up.
	DenialWindow Duration `json:"denialWindow"`
}

// Interval is the checkpoint interval.
func (a Audit) Interval() time.Duration { return time.Duration(a.CheckpointInterval) }

// Window is the denial aggregation window.
func (a Audit) Window() time.Duration { return time.Duration(a.DenialWindow) }

// Confidential configures confidential-computing launches.
// Runs configures training runs' progress reports (package runs).
type Runs struct {
	// ReportURL is how a training Job's pods reach Gantry (its base URL,
	// such as its in-cluster Service). Default: publicURL unless that is a
	// loopback address; without either, runs do not report.
	ReportURL string `json:"reportURL"`
}

// RunReportURL is the base URL training Jobs report their progress to, or
// "" when they cannot reach Gantry (see Runs.ReportURL).
func (c *Config) RunReportURL() string {
	if c.Runs.ReportURL != "" {
		return c.Runs.ReportURL
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || u.Host == "" {
		return ""
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
		return ""
	}
	return c.PublicURL
}

type Confidential struct {
	// KBSURL is the key broker (Trustee KBS) the attestation agent of every
	// confidential pod reports to; without it confidential launches are refused.
	KBSURL string `json:"kbsURL"`
}

// Images configures the approved image catalog and how images are verified.
type Images struct {
	Dir string `json:"dir"` // the catalog: Image documents and keys/
	// RegistryAuthFile is a docker config.json or a pull secret's
	// .dockerconfigjson with registry credentials (default: none, anonymous).
	RegistryAuthFile string `json:"registryAuthFile"`
	// CacheTTL is how long a verified digest stays verified.
	CacheTTL Duration `json:"cacheTTL"`
	// Mirrors maps a catalog registry host to the host to fetch from.
	Mirrors map[string]string `json:"mirrors"`
	// DevRegistry runs a local registry holding a signed stand-in for every
	// catalog image, signed with a development key kept in the data directory
	// and trusted for this process only (gantry dev; never in production).
	DevRegistry bool `json:"devRegistry"`
}

// TTL is the verification cache TTL.
func (i Images) TTL() time.Duration { return time.Duration(i.CacheTTL) }

// DevLogin configures the development OpenID provider.
type DevLogin struct {
	Listen string    `json:"listen"` // default 127.0.0.1:0 (any free port)
	Users  []DevUser `json:"users"`
}

// DevUser is a user of the development provider; Groups are the groups the
// ID token carries, which policy/bindings.yaml maps to teams and roles.
type DevUser struct {
	Username string   `json:"username"`
	Password Secret   `json:"password"`
	Name     string   `json:"name"`
	Email    string   `json:"email"`
	Groups   []string `json:"groups"`
	// SecondFactor: the development provider says this user signed in
	// with a second factor (amr otp), as platform roles need.
	SecondFactor bool `json:"secondFactor"`
}

// OIDC configures sign-in with an OpenID provider: the portal's client (code
// flow with PKCE), the CLI's client (device grant), and bearer verification.
type OIDC struct {
	Issuer string `json:"issuer"`
	// ClientID and ClientSecret are the portal's client; the secret may be
	// empty for a public client (PKCE still applies).
	ClientID     string `json:"clientID"`
	ClientSecret Secret `json:"clientSecret"`
	// CLIClientID is the public client `gantry login` uses (device grant).
	CLIClientID string   `json:"cliClientID"`
	Scopes      []string `json:"scopes"`
	// Audiences are the client ids whose tokens the API accepts (default: the
	// portal's and the CLI's).
	Audiences    []string `json:"audiences"`
	ClockSkew    Duration `json:"clockSkew"`
	SubjectClaim string   `json:"subjectClaim"`
	EmailClaim   string   `json:"emailClaim"`
	NameClaim    string   `json:"nameClaim"`
	GroupsClaim  string   `json:"groupsClaim"`
	// SecondFactorAMR and SecondFactorACR say which amr methods (default
	// mfa, otp, hwk) or acr classes show a second factor; ACRValues is what
	// a sign-in asks the provider for when one is needed.
	SecondFactorAMR []string `json:"secondFactorAMR"`
	SecondFactorACR []string `json:"secondFactorACR"`
	ACRValues       string   `json:"acrValues"`
}

// Skew is the configured clock skew.
func (o OIDC) Skew() time.Duration { return time.Duration(o.ClockSkew) }

// Database selects the store.
type Database struct {
	Driver string `json:"driver"` // sqlite | postgres
	DSN    Secret `json:"dsn"`    // SQLite file path or PostgreSQL URL
}

// Log configures log/slog.
type Log struct {
	Level  string `json:"level"`  // debug | info | warn | error
	Format string `json:"format"` // text | json
}

// Default is the embedded configuration: SQLite in the user's data directory,
// loopback only, the starter catalog from ./templates.
func Default() Config {
	return Config{
		Listen:            "127.0.0.1:8080",
		Database:          Database{Driver: "sqlite", DSN: Secret(defaultDBPath())},
		TemplatesDir:      "templates",
		GPUClassesFile:    "templates/gpu-classes.yaml",
		NamespacePrefix:   "gantry-",
		MaxBodyBytes:      1 << 20,
		CapacityInformers: true,
		Log:               Log{Level: "info", Format: "text"},
		PolicyDir:         "policy",
		Images:            Images{Dir: "images", CacheTTL: Duration(10 * time.Minute)},
		ReconcileInterval: Duration(15 * time.Second),
		LogDrain:          Duration(35 * time.Second),
		Namespace:         "gantry-system",
		LeaseDuration:     Duration(15 * time.Second),
		AppDial:           AppDialDNS,
		SessionLifetime:   Duration(8 * time.Hour),
		MaxGroupAge:       Duration(24 * time.Hour),
		OIDC:              OIDC{ClockSkew: Duration(30 * time.Second)},
		DevLogin:          DevLogin{Listen: "127.0.0.1:0", Users: DefaultDevUsers()},
		Audit:             Audit{CheckpointInterval: Duration(time.Minute), DenialWindow: Duration(time.Minute)},
		TLS:               TLS{MinVersion: "1.2"},
		Security:          Security{AnonymousRate: 5, AnonymousBurst: 50, StreamsPerIdentity: 100, StreamsPerReplica: 10_000},
		Quota:             Quota{Kueue: true, KueueNamespace: "kueue-system"},
		Energy:            Energy{PUE: 1},
		Telemetry: Telemetry{RawRetention: Duration(48 * time.Hour), RollupRetention: Duration(90 * 24 * time.Hour), Audience: "gantry",
			ServiceAccount: "system:serviceaccount:gantry-system:gantry-agent", XIDHold: Duration(24 * time.Hour),
			Quarantine: "NoSchedule", Move: true, QuarantineClean: Duration(15 * time.Minute),
			PreflightImage: "ghcr.io/gantryhq/gantry-agent:latest", PreflightCommand: []string{"gantry-agent", "check"}},
	}
}

// How /w/{id}/ reaches an app (Config.AppDial).
const (
	AppDialDNS       = "dns"
	AppDialEndpoints = "endpoints"
)

// DefaultDevUsers are the development provider's users: one per kind of
// person the default policy knows (policy/bindings.yaml binds their groups).
func DefaultDevUsers() []DevUser {
	return []DevUser{
		{Username: "alice", Password: "alice", Name: "Alice Moreau (data scientist, team vision)", Email: "alice@gantry.localhost", Groups: []string{"ml-vision"}},
		{Username: "lee", Password: "lee", Name: "Lee Park (team lead, team vision)", Email: "lee@gantry.localhost", Groups: []string{"ml-vision-leads"}},
		{Username: "pat", Password: "pat", Name: "Pat Okafor (platform engineer)", Email: "pat@gantry.localhost", Groups: []string{"platform-team"}, SecondFactor: true},
		{Username: "ada", Password: "ada", Name: "Ada Lindqvist (platform admin)", Email: "ada@gantry.localhost", Groups: []string{"gantry-admins"}, SecondFactor: true},
		{Username: "vic", Password: "vic", Name: "Vic Tanaka (auditor)", Email: "vic@gantry.localhost", Groups: []string{"auditors"}},
	}
}

// Redirect is the portal's sign-in callback URL.
func (c *Config) Redirect() string { return strings.TrimSuffix(c.PublicURL, "/") + "/auth/callback" }

// Session is the session lifetime.
func (c *Config) Session() time.Duration { return time.Duration(c.SessionLifetime) }

func defaultDBPath() string { return filepath.Join(DataDir(), "gantry.db") }

// DataDir is where Gantry keeps local state: $XDG_DATA_HOME/gantry
// (~/.local/share/gantry).
func DataDir() string {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "."
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "gantry")
}

// Load builds the configuration from defaults, the file (when path is not
// empty), the environment (lookup, usually os.LookupEnv) and flags, and checks
// it. All problems come back together as *fault.Invalid.
func Load(path string, lookup func(string) (string, bool), f Flags) (Config, error) {
	c := Default()
	var errs fault.List
	lines := yamldoc.Lines{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		// Decode over the defaults so that the file sets only what it names.
		l, err := yamldoc.Decode(path, data, &c)
		if err != nil {
			errs.AddErr("", err)
		}
		lines = l
	}
	for _, o := range options {
		if v, ok := lookup(o.env); ok && o.env != "" {
			if err := set(o.field(&c), v); err != nil {
				errs.Addf(o.env, "%v", err)
			}
		}
	}
	for _, o := range options {
		if v := f[o.flag]; o.flag != "" && v != "" {
			if err := set(o.field(&c), v); err != nil {
				errs.Addf("--"+o.flag, "%v", err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f)) {
		if !slices.ContainsFunc(options, func(o option) bool { return o.flag == name && name != "" }) {
			errs.Addf("--"+name, "is not a configuration flag")
		}
	}
	if err := c.validate(); err != nil {
		if path != "" {
			err = lines.Locate(path, err)
		}
		errs.AddErr("", err)
	}
	return c, errs.Err()
}

func (c *Config) validate() error {
	var errs fault.List
	c.validateListenAndDatabase(&errs)
	c.validateAuth(&errs)
	for _, kv := range [][2]string{{"publicURL", c.PublicURL}, {"runs.reportURL", c.Runs.ReportURL}} {
		key, v := kv[0], kv[1]
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" {
			errs.Addf(key, "%q must be an http or https URL without query", v)
		} else if key == "publicURL" && strings.Trim(u.Path, "/") != "" {
			// The portal, the API, the sign-in callback and its cookies
			// all live at the host's root.
			errs.Addf(key, "%q has a path: Gantry is served at the root of its host, not under a path prefix", v)
		}
	}
	c.validateDurations(&errs)
	if c.AppDial != AppDialDNS && c.AppDial != AppDialEndpoints {
		errs.Addf("appDial", "%q is not %s or %s", c.AppDial, AppDialDNS, AppDialEndpoints)
	} else if c.AppDial == AppDialEndpoints && c.Kubeconfig == "" {
		errs.Addf("appDial", "endpoints reads Services from the cluster: set kubeconfig (or in-cluster)")
	}
	if c.PolicyDir == "" {
		errs.Addf("policyDir", "is required")
	}
	c.validateImages(&errs)
	c.validateLimitsAndLogs(&errs)
	return errs.Err()
}

// validateListenAndDatabase checks listen and database.
func (c *Config) validateListenAndDatabase(errs *fault.List) {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		errs.Addf("listen", "%q is not host:port", c.Listen)
	} else {
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			errs.Addf("listen", "%q is not a port", port)
		}
		if !loopback(host) && c.OIDC.Issuer == "" {
			errs.Addf("listen", "%q is not a loopback address: without authentication (oidc.issuer) Gantry serves on loopback only (127.0.0.1, ::1, localhost)", host)
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs.Addf("tls", "certFile and keyFile go together: set both (HTTPS) or neither (HTTP)")
	}
	if c.TLS.MinVersion != "1.2" && c.TLS.MinVersion != "1.3" {
		errs.Addf("tls.minVersion", "%q is not 1.2 or 1.3", c.TLS.MinVersion)
	}
	switch c.Database.Driver {
	case "sqlite", "postgres":
	default:
		errs.Addf("database.driver", "%q is not sqlite or postgres", c.Database.Driver)
	}
	if c.Database.DSN == "" {
		errs.Addf("database.dsn", "is required")
	} else if c.Database.Driver == "postgres" && !strings.HasPrefix(string(c.Database.DSN), "postgres://") && !strings.HasPrefix(string(c.Database.DSN), "postgresql://") && !strings.Contains(string(c.Database.DSN), "=") {
		errs.Addf("database.dsn", "is not a PostgreSQL URL (postgres://...) or key=value connection string")
	}
}

// validateAuth checks oidc, defaulting its audiences to the client ids, or
// devLogin when oidc.issuer is empty.
func (c *Config) validateAuth(errs *fault.List) {
	if _, err := c.Security.Proxies(); err != nil {
		errs.Addf("security.trustedProxies", "%v", err)
	}
	if c.OIDC.Issuer != "" {
		u, err := url.Parse(c.OIDC.Issuer)
		if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname()))) {
			errs.Addf("oidc.issuer", "%q must be an https URL (http only on loopback)", c.OIDC.Issuer)
		}
		if c.OIDC.ClientID == "" {
			errs.Addf("oidc.clientID", "the portal's client id is required with oidc.issuer")
		}
		if len(c.OIDC.Audiences) == 0 {
			c.OIDC.Audiences = []string{c.OIDC.ClientID}
			if c.OIDC.CLIClientID != "" {
				c.OIDC.Audiences = append(c.OIDC.Audiences, c.OIDC.CLIClientID)
			}
		}
		return
	}
	if h, _, err := net.SplitHostPort(c.DevLogin.Listen); err != nil || !loopback(h) {
		errs.Addf("devLogin.listen", "%q must be a loopback host:port: the development provider is for this machine only", c.DevLogin.Listen)
	}
	if len(c.DevLogin.Users) == 0 {
		errs.Addf("devLogin.users", "at least one user is required when oidc.issuer is empty")
	}
	seen := map[string]bool{}
	for i, u := range c.DevLogin.Users {
		f := fmt.Sprintf("devLogin.users[%d]", i)
		if u.Username == "" || u.Password == "" {
			errs.Addf(f, "username and password are required")
		}
		if seen[u.Username] {
			errs.Addf(f+".username", "%q appears twice", u.Username)
		}
		seen[u.Username] = true
	}
}

// validateDurations checks that the durations are within their bounds.
func (c *Config) validateDurations(errs *fault.List) {
	between := func(key string, d Duration, lo, hi time.Duration) {
		if time.Duration(d) < lo || time.Duration(d) > hi {
			errs.Addf(key, "%s must be between %s and %s", d, Duration(lo), Duration(hi))
		}
	}
	between("sessionLifetime", c.SessionLifetime, time.Minute, 30*24*time.Hour)
	between("maxGroupAge", c.MaxGroupAge, time.Minute, 366*24*time.Hour)
	between("oidc.clockSkew", c.OIDC.ClockSkew, 0, 5*time.Minute)
	between("images.cacheTTL", c.Images.CacheTTL, 0, 24*time.Hour)
	between("reconcileInterval", c.ReconcileInterval, time.Second, 24*time.Hour)
	between("logDrain", c.LogDrain, time.Second, 5*time.Minute)
	between("leaseDuration", c.LeaseDuration, 2*time.Second, 5*time.Minute)
	between("audit.checkpointInterval", c.Audit.CheckpointInterval, time.Second, 24*time.Hour)
	between("audit.denialWindow", c.Audit.DenialWindow, time.Second, 24*time.Hour)
}

// validateImages checks images.devRegistry, confidential.kbsURL, images.dir,
// images.mirrors, templatesDir and gpuClassesFile.
func (c *Config) validateImages(errs *fault.List) {
	if c.Images.DevRegistry && c.OIDC.Issuer != "" {
		errs.Addf("images.devRegistry", "trusts a development signing key: only for local development, not with oidc.issuer")
	}
	if k := c.Confidential.KBSURL; k != "" {
		if u, err := url.Parse(k); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(k, "'\"\n") {
			errs.Addf("confidential.kbsURL", "%q is not an http or https URL", k)
		}
	}
	if c.Images.Dir == "" {
		errs.Addf("images.dir", "is required")
	}
	for from, to := range c.Images.Mirrors {
		host, _ := MirrorHost(to)
		if from == "" || host == "" || strings.ContainsAny(from+host, "/ ") {
			errs.Addf("images.mirrors", "%q: %q must map a registry host to a registry host (http://host for plain HTTP)", from, to)
		}
	}
	if c.TemplatesDir == "" {
		errs.Addf("templatesDir", "is required")
	}
	if c.GPUClassesFile == "" {
		errs.Addf("gpuClassesFile", "is required")
	}
}

// validateLimitsAndLogs checks namespacePrefix, maxBodyBytes, the anonymous
// limit, log and namespace.
func (c *Config) validateLimitsAndLogs(errs *fault.List) {
	if len(c.NamespacePrefix) > 20 || strings.Trim(c.NamespacePrefix, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		errs.Addf("namespacePrefix", "%q must be at most 20 lowercase letters, digits or '-'", c.NamespacePrefix)
	}
	if c.MaxConcurrentReads < 0 || c.MaxConcurrentReads > 4096 {
		errs.Addf("maxConcurrentReads", "%d must be between 0 (two per CPU) and 4096", c.MaxConcurrentReads)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 64<<20 {
		errs.Addf("maxBodyBytes", "%d must be between 1024 and %d", c.MaxBodyBytes, 64<<20)
	}
	if c.Security.AnonymousRate < 0 || c.Security.AnonymousRate > 100_000 {
		errs.Addf("security.anonymousRate", "%d must be between 0 (no limit) and 100000", c.Security.AnonymousRate)
	}
	if c.Security.StreamsPerIdentity < 1 || c.Security.StreamsPerIdentity > 1_000_000 {
		errs.Addf("security.streamsPerIdentity", "%d must be between 1 and 1000000", c.Security.StreamsPerIdentity)
	}
	if c.Security.StreamsPerReplica < 1 || c.Security.StreamsPerReplica > 1_000_000 {
		errs.Addf("security.streamsPerReplica", "%d must be between 1 and 1000000", c.Security.StreamsPerReplica)
	}
	if c.Security.AnonymousBurst < 1 || c.Security.AnonymousBurst > 1_000_000 {
		errs.Addf("security.anonymousBurst", "%d must be between 1 and 1000000", c.Security.AnonymousBurst)
	}
	c.validateTelemetry(errs)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs.Addf("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs.Addf("log.format", "%q is not text or json", c.Log.Format)
	}
	if len(c.Namespace) == 0 || len(c.Namespace) > 63 || strings.Trim(c.Namespace, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasPrefix(c.Namespace, "-") || strings.HasSuffix(c.Namespace, "-") {
		errs.Addf("namespace", "%q must be a namespace name (a DNS label)", c.Namespace)
	}
}

// Lease is the leader election lease duration.
func (c *Config) Lease() time.Duration { return time.Duration(c.LeaseDuration) }

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Reconcile is the lifecycle loop's interval.
func (c *Config) Reconcile() time.Duration { return time.Duration(c.ReconcileInterval) }

// Logger builds the slog logger the configuration asks for, writing to
// standard error.
func (c *Config) Logger() *slog.Logger { return c.LoggerTo(os.Stderr) }

// LoggerTo is Logger writing to w (a test's own output).
func (c *Config) LoggerTo(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	// Lines logged with a request's context carry its request and workload
	// ids (package logctx).
	if c.Log.Format == "json" {
		return slog.New(logctx.Handler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(logctx.Handler(slog.NewTextHandler(w, opts)))
}

// validateTelemetry checks the telemetry and metrics settings.
func (c *Config) validateTelemetry(errs *fault.List) {
	t := c.Telemetry
	if d := time.Duration(t.RawRetention); d < time.Hour || d > 30*24*time.Hour {
		errs.Addf("telemetry.rawRetention", "%s must be between 1h and 720h", d)
	}
	if d := time.Duration(t.RollupRetention); d < time.Duration(t.RawRetention) || d > 5*365*24*time.Hour {
		errs.Addf("telemetry.rollupRetention", "%s must be at least telemetry.rawRetention and at most 43800h (5 years)", d)
	}
	if d := time.Duration(t.XIDHold); d < time.Minute || d > 30*24*time.Hour {
		errs.Addf("telemetry.xidHold", "%s must be between 1m and 720h", d)
	}
	if p := c.Energy.PUE; p < 1 || p > 3 {
		errs.Addf("energy.pue", "%g: a power usage effectiveness from 1 to 3", p)
	}
	if u := c.Energy.CarbonSDK; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		errs.Addf("energy.carbonSDK", "%q must be an http(s) URL", u)
	}
	switch t.Quarantine {
	case "NoSchedule", "NoExecute", "off":
	default:
		errs.Addf("telemetry.quarantine", "%q must be NoSchedule, NoExecute or off", t.Quarantine)
	}
	if d := time.Duration(t.QuarantineClean); d < time.Minute || d > 7*24*time.Hour {
		errs.Addf("telemetry.quarantineClean", "%s must be between 1m and 168h", d)
	}
	if t.Quarantine != "off" && (t.PreflightImage == "" || len(t.PreflightCommand) == 0) {
		errs.Addf("telemetry.preflightImage", "the preflight check's image and command are required while telemetry.quarantine is on")
	}
	if t.Audience == "" {
		errs.Addf("telemetry.audience", "is required")
	}
	if parts := strings.Split(t.ServiceAccount, ":"); len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		errs.Addf("telemetry.serviceAccount", "%q must be system:serviceaccount:<namespace>:<name>", t.ServiceAccount)
	}
	if u := c.Metrics.PrometheusURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			errs.Addf("metrics.prometheusURL", "%q is not an http(s) URL", u)
		}
	}
}

// MirrorHost reads an images.mirrors value: the registry host it names, and
// whether it was written http://host — plain HTTP by the operator's choice.
// A bare host or https://host is fetched as any registry is.
func MirrorHost(mirror string) (host string, plainHTTP bool) {
	if host, ok := strings.CutPrefix(mirror, "http://"); ok {
		return host, true
	}
	return strings.TrimPrefix(mirror, "https://"), false
}
