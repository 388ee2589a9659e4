// Package config owns Gantry's configuration: one YAML file, then environment
// variables (GANTRY_*), then command-line flags, each overriding the one before.
// Every problem is reported at start-up at once, with file:line for the file; the
// database connection string is a Secret that never prints.
package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
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
	Listen          string   `json:"listen"`
	Database        Database `json:"database"`
	TemplatesDir    string   `json:"templatesDir"`
	GPUClassesFile  string   `json:"gpuClassesFile"`
	NamespacePrefix string   `json:"namespacePrefix"`
	MaxBodyBytes    int64    `json:"maxBodyBytes"`
	Log             Log      `json:"log"`
	// PublicURL is how browsers reach Gantry (e.g. https://gantry.example.com);
	// sign-in redirects come back to it, and an https URL makes cookies Secure.
	// Default: http:// and the address Gantry listens on.
	PublicURL string `json:"publicURL"`
	// SessionLifetime is how long a browser stays signed in.
	SessionLifetime string `json:"sessionLifetime"`
	// DevLogin is the development OpenID provider Gantry runs in-process when
	// oidc.issuer is empty (loopback only), with its users.
	DevLogin DevLogin `json:"devLogin"`
	// PolicyDir holds model.conf, roles.csv and bindings.yaml.
	PolicyDir string `json:"policyDir"`
	// Images configures the image catalog and verification.
	Images Images `json:"images"`
	// Confidential configures confidential launches.
	Confidential Confidential `json:"confidential"`
	// OIDC, when its issuer is set, authenticates every API request with a
	// bearer token from that provider (and the dev user is not used).
	OIDC OIDC `json:"oidc"`
	// Kubeconfig is the cluster workloads are applied to; without one, launches
	// are recorded and rendered but not applied.
	Kubeconfig string `json:"kubeconfig"`
	// ReconcileInterval is how often unapplied launches are retried.
	ReconcileInterval string `json:"reconcileInterval"`
	// Namespace is Gantry's own namespace: its replicas' Lease is there.
	Namespace string `json:"namespace"`
	// LeaseDuration is how long replicas wait for a leader that stopped
	// renewing its Lease before one of them takes over.
	LeaseDuration string `json:"leaseDuration"`
	// RemoveOrphans deletes objects that carry Gantry's labels but belong to no
	// live workload; otherwise they are only reported.
	RemoveOrphans bool `json:"removeOrphans"`
}

// Confidential configures confidential-computing launches.
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
	CacheTTL string `json:"cacheTTL"`
	// Mirrors maps a catalog registry host to the host to fetch from.
	Mirrors map[string]string `json:"mirrors"`
	// DevRegistry runs a local registry holding a signed stand-in for every
	// catalog image, signed with a development key kept in the data directory
	// and trusted for this process only (gantry dev; never in production).
	DevRegistry bool `json:"devRegistry"`
}

// TTL is the verification cache TTL (validated by Load).
func (i Images) TTL() time.Duration {
	d, _ := time.ParseDuration(i.CacheTTL)
	return d
}

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
	ClockSkew    string   `json:"clockSkew"`
	SubjectClaim string   `json:"subjectClaim"`
	EmailClaim   string   `json:"emailClaim"`
	NameClaim    string   `json:"nameClaim"`
	GroupsClaim  string   `json:"groupsClaim"`
}

// Skew is the configured clock skew (validated by Load).
func (o OIDC) Skew() time.Duration {
	d, _ := time.ParseDuration(o.ClockSkew)
	return d
}

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
		Log:               Log{Level: "info", Format: "text"},
		PolicyDir:         "policy",
		Images:            Images{Dir: "images", CacheTTL: "10m"},
		ReconcileInterval: "15s",
		Namespace:         "gantry-system",
		LeaseDuration:     "15s",
		SessionLifetime:   "8h",
		OIDC:              OIDC{ClockSkew: "30s", Scopes: []string{"openid", "profile", "email", "groups", "offline_access"}},
		DevLogin:          DevLogin{Listen: "127.0.0.1:0", Users: DefaultDevUsers()},
	}
}

// DefaultDevUsers are the development provider's users: one per kind of
// person the default policy knows (policy/bindings.yaml binds their groups).
func DefaultDevUsers() []DevUser {
	return []DevUser{
		{Username: "alice", Password: "alice", Name: "Alice Moreau (data scientist, team vision)", Email: "alice@gantry.localhost", Groups: []string{"ml-vision"}},
		{Username: "lee", Password: "lee", Name: "Lee Park (team lead, team vision)", Email: "lee@gantry.localhost", Groups: []string{"ml-vision-leads"}},
		{Username: "pat", Password: "pat", Name: "Pat Okafor (platform engineer)", Email: "pat@gantry.localhost", Groups: []string{"platform-team"}},
		{Username: "ada", Password: "ada", Name: "Ada Lindqvist (platform admin)", Email: "ada@gantry.localhost", Groups: []string{"gantry-admins"}},
		{Username: "vic", Password: "vic", Name: "Vic Tanaka (auditor)", Email: "vic@gantry.localhost", Groups: []string{"auditors"}},
	}
}

// Redirect is the portal's sign-in callback URL.
func (c *Config) Redirect() string { return strings.TrimSuffix(c.PublicURL, "/") + "/auth/callback" }

// Session is the session lifetime (validated by Load).
func (c *Config) Session() time.Duration {
	d, _ := time.ParseDuration(c.SessionLifetime)
	return d
}

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

// Flags are command-line overrides; empty fields override nothing.
type Flags struct {
	Listen     string
	Driver     string
	DSN        string
	LogLevel   string
	Kubeconfig string
}

// env maps variables to the fields they set.
var env = []struct {
	name string
	set  func(*Config, string) error
}{
	{"GANTRY_LISTEN", func(c *Config, v string) error { c.Listen = v; return nil }},
	{"GANTRY_DATABASE_DRIVER", func(c *Config, v string) error { c.Database.Driver = v; return nil }},
	{"GANTRY_DATABASE_DSN", func(c *Config, v string) error { c.Database.DSN = Secret(v); return nil }},
	{"GANTRY_TEMPLATES_DIR", func(c *Config, v string) error { c.TemplatesDir = v; return nil }},
	{"GANTRY_GPU_CLASSES_FILE", func(c *Config, v string) error { c.GPUClassesFile = v; return nil }},
	{"GANTRY_NAMESPACE_PREFIX", func(c *Config, v string) error { c.NamespacePrefix = v; return nil }},
	{"GANTRY_MAX_BODY_BYTES", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		c.MaxBodyBytes = n
		return nil
	}},
	{"GANTRY_LOG_LEVEL", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"GANTRY_LOG_FORMAT", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"GANTRY_PUBLIC_URL", func(c *Config, v string) error { c.PublicURL = v; return nil }},
	{"GANTRY_SESSION_LIFETIME", func(c *Config, v string) error { c.SessionLifetime = v; return nil }},
	{"GANTRY_DEV_LOGIN_LISTEN", func(c *Config, v string) error { c.DevLogin.Listen = v; return nil }},
	{"GANTRY_OIDC_CLIENT_ID", func(c *Config, v string) error { c.OIDC.ClientID = v; return nil }},
	{"GANTRY_OIDC_CLIENT_SECRET", func(c *Config, v string) error { c.OIDC.ClientSecret = Secret(v); return nil }},
	{"GANTRY_OIDC_CLI_CLIENT_ID", func(c *Config, v string) error { c.OIDC.CLIClientID = v; return nil }},
	{"GANTRY_KUBECONFIG", func(c *Config, v string) error { c.Kubeconfig = v; return nil }},
	{"GANTRY_POLICY_DIR", func(c *Config, v string) error { c.PolicyDir = v; return nil }},
	{"GANTRY_CONFIDENTIAL_KBS_URL", func(c *Config, v string) error { c.Confidential.KBSURL = v; return nil }},
	{"GANTRY_IMAGES_DIR", func(c *Config, v string) error { c.Images.Dir = v; return nil }},
	{"GANTRY_IMAGES_REGISTRY_AUTH_FILE", func(c *Config, v string) error { c.Images.RegistryAuthFile = v; return nil }},
	{"GANTRY_IMAGES_DEV_REGISTRY", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		c.Images.DevRegistry = b
		return nil
	}},
	{"GANTRY_OIDC_ISSUER", func(c *Config, v string) error { c.OIDC.Issuer = v; return nil }},
	{"GANTRY_OIDC_AUDIENCES", func(c *Config, v string) error { c.OIDC.Audiences = strings.Split(v, ","); return nil }},
	{"GANTRY_RECONCILE_INTERVAL", func(c *Config, v string) error { c.ReconcileInterval = v; return nil }},
	{"GANTRY_NAMESPACE", func(c *Config, v string) error { c.Namespace = v; return nil }},
	{"GANTRY_LEASE_DURATION", func(c *Config, v string) error { c.LeaseDuration = v; return nil }},
	{"GANTRY_REMOVE_ORPHANS", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		c.RemoveOrphans = b
		return nil
	}},
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
	for _, e := range env {
		if v, ok := lookup(e.name); ok {
			if err := e.set(&c, v); err != nil {
				errs.Addf(e.name, "%v", err)
			}
		}
	}
	if f.Listen != "" {
		c.Listen = f.Listen
	}
	if f.Driver != "" {
		c.Database.Driver = f.Driver
	}
	if f.DSN != "" {
		c.Database.DSN = Secret(f.DSN)
	}
	if f.LogLevel != "" {
		c.Log.Level = f.LogLevel
	}
	if f.Kubeconfig != "" {
		c.Kubeconfig = f.Kubeconfig
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
	} else {
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
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" {
			errs.Addf("publicURL", "%q must be an http or https URL without query", c.PublicURL)
		}
	}
	if d, err := time.ParseDuration(c.SessionLifetime); err != nil || d < time.Minute || d > 30*24*time.Hour {
		errs.Addf("sessionLifetime", "%q must be a duration between 1m and 720h", c.SessionLifetime)
	}
	if d, err := time.ParseDuration(c.OIDC.ClockSkew); err != nil || d < 0 || d > 5*time.Minute {
		errs.Addf("oidc.clockSkew", "%q must be a duration between 0s and 5m", c.OIDC.ClockSkew)
	}
	if c.PolicyDir == "" {
		errs.Addf("policyDir", "is required")
	}
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
	if d, err := time.ParseDuration(c.Images.CacheTTL); err != nil || d < 0 || d > 24*time.Hour {
		errs.Addf("images.cacheTTL", "%q must be a duration between 0s and 24h", c.Images.CacheTTL)
	}
	for from, to := range c.Images.Mirrors {
		if from == "" || to == "" || strings.ContainsAny(from+to, "/ ") {
			errs.Addf("images.mirrors", "%q: %q must map a registry host to a registry host", from, to)
		}
	}
	if c.TemplatesDir == "" {
		errs.Addf("templatesDir", "is required")
	}
	if c.GPUClassesFile == "" {
		errs.Addf("gpuClassesFile", "is required")
	}
	if len(c.NamespacePrefix) > 20 || strings.Trim(c.NamespacePrefix, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		errs.Addf("namespacePrefix", "%q must be at most 20 lowercase letters, digits or '-'", c.NamespacePrefix)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 64<<20 {
		errs.Addf("maxBodyBytes", "%d must be between 1024 and %d", c.MaxBodyBytes, 64<<20)
	}
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
	if d, err := time.ParseDuration(c.ReconcileInterval); err != nil || d < time.Second {
		errs.Addf("reconcileInterval", "%q must be a duration of at least 1s", c.ReconcileInterval)
	}
	if len(c.Namespace) == 0 || len(c.Namespace) > 63 || strings.Trim(c.Namespace, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasPrefix(c.Namespace, "-") || strings.HasSuffix(c.Namespace, "-") {
		errs.Addf("namespace", "%q must be a namespace name (a DNS label)", c.Namespace)
	}
	if d, err := time.ParseDuration(c.LeaseDuration); err != nil || d < 2*time.Second || d > 5*time.Minute {
		errs.Addf("leaseDuration", "%q must be a duration between 2s and 5m", c.LeaseDuration)
	}
	return errs.Err()
}

// Lease is the leader election lease duration (validated by Load).
func (c *Config) Lease() time.Duration {
	d, _ := time.ParseDuration(c.LeaseDuration)
	return d
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Reconcile is the reconcile interval (validated by Load).
func (c *Config) Reconcile() time.Duration {
	d, _ := time.ParseDuration(c.ReconcileInterval)
	return d
}

// Logger builds the slog logger the configuration asks for.
func (c *Config) Logger() *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
