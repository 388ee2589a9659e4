package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/portal"
)

// app is what serve and apply share: configuration, store and domain services.
type app struct {
	cfg       config.Config
	log       *slog.Logger
	store     *store.Store
	catalog   *catalog.Service
	workloads *workload.Service
	images    *imageverify.Images
}

func loadConfig(path string, f config.Flags) (config.Config, error) {
	if path == "" {
		path = os.Getenv("GANTRY_CONFIG")
	}
	return config.Load(path, os.LookupEnv, f)
}

func open(ctx context.Context, cfg config.Config) (*app, error) {
	log := cfg.Logger()
	classes, err := gpu.LoadFile(cfg.GPUClassesFile)
	if err != nil {
		return nil, err
	}
	images, err := imagecat.Load(cfg.Images.Dir, classes)
	if err != nil {
		return nil, err
	}
	vo := imageverify.Options{TTL: cfg.Images.TTL(), Mirrors: cfg.Images.Mirrors}
	if f := cfg.Images.RegistryAuthFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("images.registryAuthFile: %w", err)
		}
		if vo.Keychain, err = imageverify.Keychain(data); err != nil {
			return nil, fmt.Errorf("images.registryAuthFile %s: %w", f, err)
		}
	}
	verified := &imageverify.Images{Catalog: images, Verifier: imageverify.New(vo)}
	if cfg.Images.DevRegistry {
		keyPath := filepath.Join(config.DataDir(), "dev-signing.key")
		key, err := devregistry.LoadOrCreateKey(keyPath)
		if err != nil {
			return nil, fmt.Errorf("development signing key: %w", err)
		}
		reg, v, err := devregistry.Verified(ctx, images, key, vo)
		if err != nil {
			return nil, err
		}
		verified = v
		log.Warn("images.devRegistry: stand-in images signed with a development key are trusted (never in production)",
			"registry", reg.Host, "key", keyPath, "images", len(reg.Published))
	}
	st, err := store.Open(ctx, cfg.Database.Driver, string(cfg.Database.DSN))
	if err != nil {
		return nil, err
	}
	cat := catalog.New(st, classes).WithImages(images)
	prefix := cfg.NamespacePrefix
	wl := workload.New(st, cat, func(team string) string { return prefix + team }).WithImages(verified)
	if k := cfg.Confidential.KBSURL; k != "" {
		if err := wl.WithConfidential(k); err != nil {
			return nil, fmt.Errorf("confidential.kbsURL: %w", err)
		}
	}
	return &app{cfg: cfg, log: log, store: st, catalog: cat, workloads: wl, images: verified}, nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flags("gantry serve", stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); also $GANTRY_CONFIG")
	var f config.Flags
	fs.StringVar(&f.Listen, "listen", "", "address to listen on (loopback only), e.g. 127.0.0.1:8080")
	fs.StringVar(&f.Driver, "db-driver", "", "database driver: sqlite or postgres")
	fs.StringVar(&f.DSN, "db", "", "database: SQLite file or PostgreSQL URL")
	fs.StringVar(&f.LogLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "cluster to apply workloads to (default: record them only)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, f)
	if err != nil {
		return err
	}
	return runServer(ctx, cfg, nil)
}

// served is what a started server tells its caller.
type served struct {
	URL    string
	Issuer string
	// Users and Token are set with the development provider: its users, and
	// a way to make a personal access token for one of them.
	Users []config.DevUser
	Token func(ctx context.Context, username string) (string, error)
}

// runServer serves the API until ctx ends. ready, when not nil, is called
// once the server listens.
func runServer(ctx context.Context, cfg config.Config, ready func(served)) error {
	a, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.store.Close()
	slog.SetDefault(a.log) // libraries that log to the default logger (the OpenID provider) log like Gantry
	a.log.Info("starting gantry", "version", version, "listen", cfg.Listen, "database", cfg.Database.Driver, "dsn", cfg.Database.DSN, "kubeconfig", cfg.Kubeconfig)

	if files, err := template.LoadDir(cfg.TemplatesDir, a.catalog.Classes(), a.images.Catalog); err != nil {
		a.log.Warn("initial template catalog not loaded", "dir", cfg.TemplatesDir, "err", err)
	} else if seeded, err := a.catalog.Seed(ctx, "gantry:initial-catalog", files); err != nil {
		return fmt.Errorf("load initial template catalog: %w", err)
	} else if seeded {
		a.log.Info("loaded initial template catalog", "dir", cfg.TemplatesDir, "templates", len(files))
	}

	checks := []api.Check{{Name: "database", Pinger: a.store}}
	if cfg.Kubeconfig != "" {
		// The kubeconfig is loaded lazily: with it missing or the API server away,
		// Gantry still serves, /readyz says why it is not ready, and launches are
		// kept and applied by the reconcile loop once the cluster answers.
		cl := kube.NewLazy(cfg.Kubeconfig, func(c *kube.Cluster) {
			err := c.Watch(ctx, func(o kube.Observation) {
				if err := a.workloads.Observe(ctx, o.WorkloadID, workload.Status(o.Phase), o.Reason); err != nil && ctx.Err() == nil {
					a.log.Warn("record workload status", "workload", o.WorkloadID, "err", err)
				}
			})
			if err != nil {
				a.log.Error("watching the cluster stopped", "err", err)
			}
		})
		a.workloads.WithCluster(cl)
		checks = append(checks, api.Check{Name: "kubernetes", Pinger: cl})
		go reconcileLoop(ctx, a, cfg.Reconcile(), cl)
	} else {
		a.log.Warn("no kubeconfig: launches are recorded and rendered, not applied to a cluster")
	}

	az, err := authz.New(authz.InDir(cfg.PolicyDir))
	if err != nil {
		return err
	}
	a.workloads.WithAuthorizer(az)
	go reloadEvery(ctx, a.log, "policy", az.Reload, authz.ErrUnchanged)
	go reloadEvery(ctx, a.log, "image catalog", a.images.Catalog.Reload, imagecat.ErrUnchanged)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String()
	public := strings.TrimSuffix(cfg.PublicURL, "/")
	if public == "" {
		public = url
	}
	oc, dev, err := signInProvider(ctx, cfg, public, a.log)
	if err != nil {
		return err
	}
	an, err := authn.New(ctx, authn.Config{Issuer: oc.Issuer, Audiences: oc.Audiences, ClockSkew: oc.Skew(),
		Claims: authn.Claims{Subject: oc.SubjectClaim, Email: oc.EmailClaim, Name: oc.NameClaim, Groups: oc.GroupsClaim}})
	if err != nil {
		return err
	}
	sessions := weblogin.New(weblogin.Config{ClientID: oc.ClientID, ClientSecret: string(oc.ClientSecret), RedirectURL: public + "/auth/callback",
		Scopes: oc.Scopes, Endpoint: an.Endpoint(), Lifetime: cfg.Session()}, an, a.store)
	tokens := token.New(a.store)
	h, err := api.New(api.Options{
		Catalog: a.catalog, Workloads: a.workloads, Checks: checks, Spec: gantry.OpenAPI,
		MaxBodyBytes: cfg.MaxBodyBytes, Logger: a.log,
		Portal:   portal.New(portal.Options{Sessions: sessions, Teams: az.Teams, Secure: strings.HasPrefix(public, "https://"), Logger: a.log, Audit: a.store}),
		Identify: an.Identify, Sessions: sessions, Tokens: tokens, Teams: az.Teams,
		SignIn:    api.AuthConfig{Issuer: oc.Issuer, CliClientID: oc.CLIClientID, Scopes: oc.Scopes},
		Authorize: az.AllowedSomewhere, Audit: a.store, Images: a.images,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("gantry is serving", "url", public, "listen", url, "issuer", oc.Issuer)
	if ready != nil {
		s := served{URL: url, Issuer: oc.Issuer}
		if dev != nil {
			s.Users = cfg.DevLogin.Users
			s.Token = func(ctx context.Context, username string) (string, error) {
				return devToken(ctx, tokens, dev.Issuer(), cfg, username)
			}
		}
		ready(s)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// signInProvider is the configured OpenID provider or, without one, the
// development provider started in-process with the configured users and two
// clients: the portal's (a fresh secret each start) and the CLI's.
func signInProvider(ctx context.Context, cfg config.Config, public string, log *slog.Logger) (config.OIDC, *devidp.Provider, error) {
	oc := cfg.OIDC
	if oc.Issuer != "" {
		return oc, nil, nil
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	oc.ClientID, oc.ClientSecret, oc.CLIClientID = "gantry-portal", config.Secret(hex.EncodeToString(secret)), "gantry-cli"
	oc.Audiences = []string{oc.ClientID, oc.CLIClientID}
	var users []devidp.User
	var names []string
	for _, u := range cfg.DevLogin.Users {
		users = append(users, devidp.User{Username: u.Username, Password: string(u.Password), Name: u.Name, Email: u.Email, Groups: u.Groups})
		names = append(names, u.Username)
	}
	dev, err := devidp.Start(ctx, cfg.DevLogin.Listen, devidp.Options{Users: users, Clients: []devidp.Client{
		{ID: oc.ClientID, Secret: string(oc.ClientSecret), RedirectURIs: []string{public + "/auth/callback"}},
		{ID: oc.CLIClientID, Device: true},
	}})
	if err != nil {
		return oc, nil, err
	}
	oc.Issuer = dev.Issuer()
	log.Warn("no oidc.issuer configured: signing in with the development OpenID provider (loopback only)", "issuer", oc.Issuer, "users", names)
	return oc, dev, nil
}

// devToken makes a personal access token for a development user, as if they
// had signed in and asked for one.
func devToken(ctx context.Context, tokens *token.Service, issuer string, cfg config.Config, username string) (string, error) {
	for _, u := range cfg.DevLogin.Users {
		if u.Username == username {
			id := identity.Identity{Issuer: issuer, Subject: devidp.User{Username: u.Username}.Subject(), Email: u.Email, Name: u.Name, Groups: u.Groups}
			_, secret, err := tokens.Create(identity.With(ctx, id), token.Request{Name: "gantry dev", Lifetime: 24 * time.Hour})
			return secret, err
		}
	}
	return "", fmt.Errorf("no development user %q", username)
}

// reloadEvery picks up edited files (the policy, the image catalog) every few
// seconds; a broken edit keeps what is in force and is logged with file:line.
func reloadEvery(ctx context.Context, log *slog.Logger, what string, reload func() error, unchanged error) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch err := reload(); {
		case err == nil:
			log.Info(what + " reloaded")
		case !errors.Is(err, unchanged):
			log.Error(what+" not reloaded; the previous one stays in force", "err", err)
		}
	}
}

// reconcileLoop applies recorded launches that are not on the cluster yet: at
// start (a crash mid-launch) and then every interval (a cluster that was away).
func reconcileLoop(ctx context.Context, a *app, every time.Duration, cluster api.Pinger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// Pinging loads a kubeconfig that was missing and starts the watch.
		if err := cluster.Ping(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("kubernetes API server not reachable", "err", err)
		}
		n, err := a.workloads.Reconcile(ctx)
		if n > 0 {
			a.log.Info("reconciled workloads", "applied", n)
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("reconcile", "err", err)
		}
		if err == nil {
			orphans, err := a.workloads.Orphans(ctx, a.cfg.RemoveOrphans)
			for _, o := range orphans {
				a.log.Warn("object carries Gantry's labels but belongs to no live workload", "object", o.String(), "workload", o.WorkloadID, "removed", a.cfg.RemoveOrphans)
			}
			if err != nil && ctx.Err() == nil {
				a.log.Warn("looking for orphaned objects", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
