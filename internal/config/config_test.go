package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:9000\ndatabase:\n  driver: postgres\n  dsn: postgres://file@db/gantry\nlog:\n  level: debug\n"), 0o600)
	c, err := Load(path, lookup(map[string]string{"GANTRY_LISTEN": "127.0.0.1:9100", "GANTRY_DATABASE_DSN": "postgres://env:pw@db/gantry"}), Flags{"listen": "[::1]:9200"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "[::1]:9200" || c.Database.Driver != "postgres" || c.Database.DSN != "postgres://env:pw@db/gantry" || c.Log.Level != "debug" || c.TemplatesDir != "templates" {
		t.Fatalf("%+v", c)
	}
}

func TestAllProblemsAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(path, []byte("listen: 0.0.0.0:8080\nlog:\n  level: loud\n  colour: red\nmaxBodyBytes: 10\n"), 0o600)
	_, err := Load(path, lookup(map[string]string{"GANTRY_MAX_BODY_BYTES": "lots"}), Flags{})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		path + ":4: log.colour: unknown field",
		path + `:1: listen: "0.0.0.0" is not a loopback address`,
		path + `:3: log.level: "loud" is not debug`,
		`GANTRY_MAX_BODY_BYTES: "lots" is not an integer`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	c := Default()
	c.Database.DSN = "postgres://gantry:hunter2@db/gantry"
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "database", c.Database, "dsn", c.Database.DSN)
	j, _ := json.Marshal(c)
	s := buf.String() + string(j) + c.Database.DSN.String()
	if strings.Contains(s, "hunter2") {
		t.Fatalf("secret leaked: %s", s)
	}
}

func TestOIDCAllowsOtherAddresses(t *testing.T) {
	env := map[string]string{"GANTRY_LISTEN": "0.0.0.0:8080", "GANTRY_OIDC_ISSUER": "https://idp.example.com",
		"GANTRY_OIDC_CLIENT_ID": "gantry-portal", "GANTRY_OIDC_CLI_CLIENT_ID": "gantry-cli", "GANTRY_OIDC_CLIENT_SECRET": "hunter2"}
	c, err := Load("", lookup(env), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.OIDC.Audiences, ",") != "gantry-portal,gantry-cli" || c.OIDC.Skew().Seconds() != 30 {
		t.Fatalf("%+v", c.OIDC)
	}
	if j, _ := json.Marshal(c); strings.Contains(string(j), "hunter2") {
		t.Error("the client secret printed")
	}
	env["GANTRY_OIDC_ISSUER"] = "http://idp.example.com"
	delete(env, "GANTRY_OIDC_CLIENT_ID")
	_, err = Load("", lookup(env), Flags{})
	if err == nil || !strings.Contains(err.Error(), "oidc.issuer") || !strings.Contains(err.Error(), "oidc.clientID") {
		t.Fatalf("err = %v", err)
	}
}

func TestDevLogin(t *testing.T) {
	c, err := Load("", lookup(nil), Flags{})
	if err != nil || len(c.DevLogin.Users) == 0 {
		t.Fatalf("defaults: %v %+v", err, c.DevLogin)
	}
	if j, _ := json.Marshal(c); strings.Contains(string(j), `"password":"alice"`) {
		t.Error("a dev password printed")
	}
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(path, []byte("devLogin:\n  listen: 0.0.0.0:9000\n  users:\n    - username: a\n      password: x\n    - username: a\n      password: y\n    - username: b\n"), 0o600)
	_, err = Load(path, lookup(nil), Flags{})
	for _, want := range []string{
		path + `:2: devLogin.listen: "0.0.0.0:9000" must be a loopback`,
		path + `:6: devLogin.users[1].username: "a" appears twice`,
		path + `:8: devLogin.users[2]: username and password are required`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestImagesAndConfidential(t *testing.T) {
	env := map[string]string{"GANTRY_IMAGES_DEV_REGISTRY": "true", "GANTRY_OIDC_ISSUER": "https://idp.example.com",
		"GANTRY_OIDC_CLIENT_ID": "p", "GANTRY_CONFIDENTIAL_KBS_URL": "kbs.example.com:8080"}
	_, err := Load("", lookup(env), Flags{})
	for _, want := range []string{
		"images.devRegistry: trusts a development signing key",
		`confidential.kbsURL: "kbs.example.com:8080" is not an http or https URL`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	c, err := Load("", lookup(map[string]string{"GANTRY_IMAGES_DEV_REGISTRY": "true", "GANTRY_CONFIDENTIAL_KBS_URL": "https://kbs.example.com"}), Flags{})
	if err != nil || !c.Images.DevRegistry || c.Images.TTL().Minutes() != 10 || c.Confidential.KBSURL != "https://kbs.example.com" {
		t.Fatalf("%+v %v", c.Images, err)
	}
}

// TestMirrors: a mirror is a registry host, with http:// for plain HTTP or
// https://; anything else is refused where it was read.
func TestMirrors(t *testing.T) {
	for _, tc := range []struct {
		mirror string
		ok     bool
	}{
		{"mirror.internal:5000", true},
		{"https://mirror.internal:5000", true},
		{"http://mirror.internal:5000", true},
		{"ftp://mirror.internal", false},
		{"mirror.internal/path", false},
		{"http://", false},
	} {
		file := filepath.Join(t.TempDir(), "gantry.yaml")
		if err := os.WriteFile(file, []byte("images:\n  mirrors:\n    registry.example.com: "+tc.mirror+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(file, lookup(nil), Flags{})
		switch {
		case tc.ok && (err != nil || c.Images.Mirrors["registry.example.com"] != tc.mirror):
			t.Errorf("%q: %v, mirrors %v", tc.mirror, err, c.Images.Mirrors)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "images.mirrors") || !strings.Contains(err.Error(), tc.mirror)):
			t.Errorf("%q: %v, want it refused", tc.mirror, err)
		}
	}
}

// TestAppDial: how /w/{id}/ reaches apps is dns or endpoints, and endpoints
// needs a cluster to read Services from.
func TestAppDial(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" for accepted
	}{
		{map[string]string{}, ""},
		{map[string]string{"GANTRY_APP_DIAL": "endpoints", "GANTRY_KUBECONFIG": "in-cluster"}, ""},
		{map[string]string{"GANTRY_APP_DIAL": "endpoints"}, "appDial: endpoints reads Services from the cluster: set kubeconfig"},
		{map[string]string{"GANTRY_APP_DIAL": "proxy"}, `appDial: "proxy" is not dns or endpoints`},
	} {
		c, err := Load("", lookup(tc.env), Flags{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.want == "" && c.AppDial != cmp.Or(tc.env["GANTRY_APP_DIAL"], AppDialDNS):
			t.Errorf("%v: appDial %q", tc.env, c.AppDial)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
}

// TestPublicURL: Gantry is served at its host's root; a path prefix is
// refused where it is set, not found later as a sign-in that never ends
// (the state cookie's path is the root's /auth/callback).
func TestPublicURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" for accepted
	}{
		{"https://gantry.example.com", ""},
		{"https://gantry.example.com/", ""},
		{"http://127.0.0.1:8080", ""},
		{"https://example.com/gantry/", `publicURL: "https://example.com/gantry/" has a path`},
		{"https://gantry.example.com/?x=1", "must be an http or https URL without query"},
	} {
		_, err := Load("", lookup(map[string]string{"GANTRY_PUBLIC_URL": tc.url}), Flags{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.url, err, tc.want)
		}
	}
	c, err := Load("", lookup(map[string]string{"GANTRY_OIDC_SCOPES": "openid,email,roles"}), Flags{})
	if err != nil || !slices.Equal(c.OIDC.Scopes, []string{"openid", "email", "roles"}) {
		t.Fatalf("GANTRY_OIDC_SCOPES: %v %v", c.OIDC.Scopes, err)
	}
}

// TestTrustedProxies: addresses and prefixes are read as prefixes; anything
// else is refused with the key.
func TestTrustedProxies(t *testing.T) {
	c, err := Load("", lookup(map[string]string{"GANTRY_SECURITY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1,fd00::/8"}), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.Security.Proxies()
	if err != nil || len(ps) != 3 || ps[1].String() != "192.0.2.1/32" {
		t.Fatalf("proxies %v, %v", ps, err)
	}
	if _, err := Load("", lookup(map[string]string{"GANTRY_SECURITY_TRUSTED_PROXIES": "10.0.0.0/8,the-ingress"}), Flags{}); err == nil ||
		!strings.Contains(err.Error(), `security.trustedProxies: "the-ingress" is neither an address nor a CIDR prefix`) {
		t.Fatalf("a name for a proxy: %v", err)
	}
}

// TestTypedDurations: a duration that is not one is an error where it was
// read — the file's line, the variable, the flag — and one out of range names
// its key.
func TestTypedDurations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:8080\nsessionLifetime: forever\nreconcileInterval: 10ms\n"), 0o600)
	_, err := Load(path, lookup(map[string]string{"GANTRY_LEASE_DURATION": "soon"}), Flags{"log-level": "debug", "kubeconfig": "", "no-such": "x"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		path + `:2: sessionLifetime: "forever" is not a duration`,
		path + `:3: reconcileInterval: 10ms must be between 1s and 24h0m0s`,
		`GANTRY_LEASE_DURATION: "soon" is not a duration`,
		`--no-such: is not a configuration flag`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	c, err := Load("", lookup(map[string]string{"GANTRY_LEASE_DURATION": "30s", "GANTRY_IMAGES_CACHE_TTL": "1h"}), Flags{})
	if err != nil || c.Lease().Seconds() != 30 || c.Images.TTL().Hours() != 1 {
		t.Fatalf("%v %v %v", c.Lease(), c.Images.TTL(), err)
	}
}

// TestOptionsTable: every option's field is settable from text where it has
// a variable or a flag, keys, variables and flags are unique, and the
// documented table has a row per option.
func TestOptionsTable(t *testing.T) {
	keys, envs, flags := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, o := range options {
		if keys[o.key] || (o.env != "" && envs[o.env]) || (o.flag != "" && flags[o.flag]) {
			t.Errorf("%s declared twice", o.key)
		}
		keys[o.key], envs[o.env], flags[o.flag] = true, true, true
		if o.doc == "" {
			t.Errorf("%s has no documentation", o.key)
		}
		if o.env != "" || o.flag != "" {
			c := Default()
			if err := set(o.field(&c), "1s"); err != nil && strings.Contains(err.Error(), "cannot be set") {
				t.Errorf("%s: %v", o.key, err)
			}
		}
	}
	if doc := Doc(); strings.Count(doc, "\n| `") != len(options) {
		t.Errorf("the documented table has %d rows for %d options", strings.Count(doc, "\n| `"), len(options))
	}
}

// TestEveryFieldIsAnOption: each leaf of Config (by its YAML key) has a row
// in the options table, so nothing is configurable without being declared
// and documented there.
func TestEveryFieldIsAnOption(t *testing.T) {
	var leaves func(t reflect.Type, prefix string) []string
	leaves = func(t reflect.Type, prefix string) []string {
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			key := prefix + strings.Split(f.Tag.Get("json"), ",")[0]
			if f.Type.Kind() == reflect.Struct {
				out = append(out, leaves(f.Type, key+".")...)
				continue
			}
			out = append(out, key)
		}
		return out
	}
	keys := map[string]bool{}
	for _, o := range options {
		keys[o.key] = true
	}
	for _, k := range leaves(reflect.TypeFor[Config](), "") {
		if !keys[k] {
			t.Errorf("configuration key %s is not in the options table", k)
		}
	}
}

// TestOptionsPointAtTheirKeys: each row's field is the field its YAML key
// names, so a row cannot set one setting while documenting another.
func TestOptionsPointAtTheirKeys(t *testing.T) {
	var c Config
	for _, o := range options {
		v := reflect.ValueOf(&c).Elem()
		for _, part := range strings.Split(o.key, ".") {
			found := false
			for i := range v.NumField() {
				if strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0] == part {
					v, found = v.Field(i), true
					break
				}
			}
			if !found {
				t.Fatalf("%s: no field for %q", o.key, part)
			}
		}
		if got := reflect.ValueOf(o.field(&c)).Pointer(); got != v.Addr().Pointer() {
			t.Errorf("%s: its row points at another field", o.key)
		}
	}
}
