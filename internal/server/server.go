// Package server is Gantry's composition root and lifecycle owner. New builds
// every service from the configuration, complete when it returns (the policy,
// the image verifier and the store are required; nothing nil means "allow"),
// and binds the listener. Run serves HTTP and runs every background loop under
// one errgroup — the policy and image-catalog reloads and the audit log's
// denial summaries and signed checkpoints always, and on the replica that
// holds the Lease the workload controller and the lifecycle loop (apply
// unapplied launches, converge stopped and deleted ones, stop those past their
// max runtime) — and returns only after all of them have stopped (then sums up
// the last denials and signs the audit log's head once more), then closes the
// store. `gantry serve`, `gantry dev` and the tests that run Gantry whole all
// go through New.
package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/capacity"
	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/controller"
	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/dispatch"
	"github.com/gantryhq/gantry/internal/kube/lead"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/kube/workers"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/logctx"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/ownmetrics"
	"github.com/gantryhq/gantry/internal/promsource"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/tlsfiles"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/trial"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/workload"
)

// Core is what every command that touches Gantry's state shares: the
// configuration, the database and its stores, the GPU classes and template
// catalog, and the image catalog with its verifier.
type Core struct {
	Config  config.Config
	Log     *slog.Logger
	Store   *stores.All
	Catalog *catalog.Service
	Images  *imageverify.Images
	// NodeGroups are the node groups in force: the file's (named by
	// nodeGroupsFile; empty when none is) with the platform team's edits
	// laid over them.
	NodeGroups *nodegroup.Set
	fileGroups *nodegroup.Set // the file's, as read
	// Fleet is the worker clusters in force: the file's (named by
	// clustersFile; empty when none is: Gantry drives one cluster) with the
	// platform team's cordons laid over them.
	Fleet     *fleet.Fleet
	fileFleet *fleet.Fleet // the file's, as read
	// carbon rates energy in gCO2e/kWh (energy.carbonSDK or
	// energy.carbonProfiles; nil: no carbon figures).
	carbon carbon.Feed

	classesStamp string // the class file as it was read (fileStamp)

	// The classes in force (Catalog.Classes) are the class file's with the
	// platform team's edited prices laid over them (internal/overlay).
	// classesMu is held across each whole change of either.
	classesMu   sync.Mutex
	fileClasses *gpu.Catalog // the class file as last put in force
	priceEdits  map[string]gpu.Price
}

// putClasses puts file's classes with prices laid over them in force, then
// records the prices that changed in their history; only then are they
// kept as fileClasses and priceEdits. The caller holds classesMu.
func (c *Core) putClasses(ctx context.Context, now time.Time, file *gpu.Catalog, prices map[string]gpu.Price) error {
	classes := file.List()
	for i, cl := range classes {
		if p, ok := prices[cl.Name]; ok {
			classes[i].Price = p
		}
	}
	f := gpu.File{APIVersion: gpu.APIVersion, Kind: gpu.Kind, Classes: classes}
	if cpu, ok := file.CPU(); ok {
		f.CPU = &cpu
	}
	n, err := gpu.New(f)
	if err != nil {
		return err
	}
	if err := c.Catalog.Classes().Replace(n); err != nil {
		return err
	}
	c.fileClasses, c.priceEdits = file, prices
	if _, err := c.Store.Governance.RecordPrices(ctx, n.List(), now); err != nil {
		return fmt.Errorf("record the prices in force: %w", err)
	}
	return nil
}

// Open builds the Core from the configuration. Close its Store when done.
func Open(ctx context.Context, cfg config.Config) (*Core, error) {
	return open(ctx, cfg, cfg.Logger(), nil, clock.RealClock{}.Now, config.DataDir())
}

// open is Open with the logger, the image verifier given (nil: from the
// configuration), the server's clock and the directory of development keys.
func open(ctx context.Context, cfg config.Config, log *slog.Logger, given *imageverify.Images, now func() time.Time, dataDir string) (*Core, error) {
	stamp := fileStamp(cfg.GPUClassesFile) // before reading: a change after it is reloaded
	classes, err := gpu.LoadFile(cfg.GPUClassesFile)
	if err != nil {
		return nil, err
	}
	images, err := imagecat.Load(cfg.Images.Dir, classes)
	if err != nil {
		return nil, err
	}
	groups := &nodegroup.Set{}
	if cfg.NodeGroupsFile != "" {
		if groups, err = nodegroup.LoadFile(cfg.NodeGroupsFile, classes.Names()); err != nil {
			return nil, err
		}
	}
	fl := &fleet.Fleet{}
	if cfg.ClustersFile != "" {
		if fl, err = fleet.LoadFile(cfg.ClustersFile, classes); err != nil {
			return nil, err
		}
	}
	if given != nil {
		return openStore(ctx, cfg, log, classes, groups, fl, given, stamp, now)
	}
	vo := imageverify.Options{TTL: cfg.Images.TTL(), Mirrors: cfg.Images.Mirrors, Now: now}
	if f := cfg.Images.RegistryAuthFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("images.registryAuthFile: %w", err)
		}
		if vo.Keychain, err = imageverify.Keychain(data); err != nil {
			return nil, fmt.Errorf("images.registryAuthFile %s: %w", f, err)
		}
	}
	v, err := imageverify.New(vo)
	if err != nil {
		return nil, err
	}
	verified := &imageverify.Images{Catalog: images, Verifier: v}
	if cfg.Images.DevRegistry {
		if verified, err = devImages(ctx, images, vo, dataDir, log); err != nil {
			return nil, err
		}
	}
	return openStore(ctx, cfg, log, classes, groups, fl, verified, stamp, now)
}

// openStore opens the store and the template catalog checked against the
// verifier's image catalog, both on the server's clock.
func openStore(ctx context.Context, cfg config.Config, log *slog.Logger, classes *gpu.Catalog, groups *nodegroup.Set, fl *fleet.Fleet, images *imageverify.Images, stamp string, now func() time.Time) (*Core, error) {
	db, err := store.Open(ctx, cfg.Database.Driver, string(cfg.Database.DSN))
	if err != nil {
		return nil, err
	}
	db.UseClock(now)
	st := stores.New(db)
	cat, err := catalog.New(catalog.Options{Store: st.Governance, Classes: classes, Images: images.Catalog, Now: now})
	if err != nil {
		db.Close()
		return nil, err
	}
	live := &nodegroup.Set{}
	live.Replace(groups)
	liveFleet := &fleet.Fleet{}
	liveFleet.Replace(fl)
	return &Core{Config: cfg, Log: log, Store: st, Catalog: cat, Images: images, NodeGroups: live, fileGroups: groups, Fleet: liveFleet, fileFleet: fl, classesStamp: stamp, fileClasses: classes.Snapshot()}, nil
}

// fileStamp identifies a file's state: its size and modification time
// ("" when it cannot be read).
func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}

// errClassesUnchanged means the GPU class file is as it was read.
var errClassesUnchanged = errors.New("GPU classes unchanged")

// reloadClasses reads the GPU class file again if it changed and puts it in
// force for every part of Gantry that holds the classes (launches, estimates,
// quotas, advice, the image catalog); the prices as they are now join their
// history (a workload keeps the price of its launch). A file that does not
// load, or that drops a class or MIG profile in force, keeps the classes in
// force and says why (file:line). Only Run's loop calls it.
func (c *Core) reloadClasses(ctx context.Context, now time.Time) error {
	path := c.Config.GPUClassesFile
	stamp := fileStamp(path)
	if stamp == c.classesStamp {
		return errClassesUnchanged
	}
	n, err := gpu.LoadFile(path)
	if err != nil {
		return err
	}
	c.classesMu.Lock()
	defer c.classesMu.Unlock()
	if err := c.putClasses(ctx, now, n, c.priceEdits); err != nil {
		return fmt.Errorf("%s: %w (tried again at the next look)", path, err)
	}
	c.classesStamp = stamp
	return nil
}

// Server is Gantry, built and listening, not yet serving.
type Server struct {
	*Core
	Workloads *workload.Service
	// Telemetry ingests agents' GPU readings and keeps the series.
	Telemetry *telemetry.Service
	// Runs takes training runs' progress reports.
	Runs *runs.Service
	// Trials starts trials and measures them from their runs' reports.
	Trials *trial.Service
	// Budgets track the teams' budgets, alert, and hold launches.
	Budgets  *budget.Service
	notifier *notify.Sender
	own      *ownmetrics.Metrics
	// fleet answers for the GPU fleet's size (node groups, forecast) and
	// sizes warm capacity.
	capacity *capacity.Service
	workers  *workers.Workers // the worker clusters' states; nil without a clusters file
	// kernels asks notebooks' apps whether a kernel executes (the idle
	// culler), reaching them as the proxy does.
	kernels *interactive.Kernels
	ln      net.Listener
	url     string
	http    *http.Server
	authz   *authz.Authorizer
	cluster *kube.Lazy // nil without a kubeconfig
	tokens  *token.Service
	users   *user.Service
	issuer  string
	dev     devProvider // nil with an organisation's provider
	checks  []api.Check
	clock   clock.WithTicker
	dataDir string // the development keys (Overrides.DataDir)
	// checkpoints signs the audit log's head (nil: no key configured).
	checkpoints *audit.Checkpointer
	// denials is what the API and the portal append to: repeated denials
	// are counted and summed up every audit.denialWindow.
	denials *audit.Aggregator
	// live holds this replica's long-lived responses and follows the
	// change feed that closes them.
	live *live.Registry
	// cert is the serving certificate (nil: plain HTTP).
	cert *tlsfiles.Certificate
	// overlays are the platform team's edits over the files; overlayPrint
	// the fingerprint of the set in force here (under classesMu).
	overlays       *overlay.Service
	overlayPrint   string
	overlayApplied bool
}

// applyOverlay puts a set of the platform team's edits in force on this
// replica: edited prices over the class file, quotas and budgets over the
// policy files.
func (s *Server) applyOverlay(ctx context.Context, set overlay.Set) error {
	s.classesMu.Lock()
	defer s.classesMu.Unlock()
	return s.applyOverlayLocked(ctx, set)
}

// applyOverlayLocked is applyOverlay with classesMu held: the prices, the
// policy and the fingerprint change together.
func (s *Server) applyOverlayLocked(ctx context.Context, set overlay.Set) error {
	if err := s.putClasses(ctx, s.clock.Now(), s.fileClasses, set.Prices); err != nil {
		return err
	}
	s.authz.SetOverlay(authz.Overlay{Quotas: set.Quotas, Budgets: set.Budgets})
	groups, err := s.fileGroups.With(set.NodeGroups, s.Catalog.Classes().Names())
	if groups == nil {
		return err
	}
	if err != nil { // the service's Load left out what does not hold
		s.Log.Warn("node group edits left out: they no longer hold", "err", err)
	}
	s.NodeGroups.Replace(groups)
	clusters, err := s.fileFleet.With(set.Clusters)
	if err != nil { // the service's Load left out what does not hold
		s.Log.Warn("cluster cordons left out: no such cluster", "err", err)
	}
	s.Fleet.Replace(clusters)
	s.overlayPrint = set.Fingerprint()
	s.overlayApplied = true
	return nil
}

// loadOverlay reads the edits and applies them when another replica (or
// this one) changed them since they were last applied here. An edit that
// no longer holds (its class gone from the file) is left out and logged.
func (s *Server) loadOverlay(ctx context.Context) error {
	set, err := s.overlays.Load(ctx)
	var inv *fault.Invalid
	switch {
	case errors.As(err, &inv):
		s.Log.Warn("platform edits left out: they no longer hold", "err", err)
	case err != nil:
		return err
	}
	s.classesMu.Lock()
	defer s.classesMu.Unlock()
	if s.overlayApplied && s.overlayPrint == set.Fingerprint() {
		return errOverlayUnchanged
	}
	return s.applyOverlayLocked(ctx, set)
}

// errOverlayUnchanged means the edits are as they were applied here.
var errOverlayUnchanged = errors.New("platform edits unchanged")

// Overrides stand in for what lies outside Gantry, for tests that need to:
// who a bearer token is, what /readyz asks, the image verifier. Production
// passes none (the zero value); each set field replaces exactly that part.
type Overrides struct {
	// Identify verifies bearer JWTs instead of the OpenID provider.
	Identify func(*http.Request) (identity.Identity, error)
	// Checks replace the readiness checks (database, cluster).
	Checks []api.Check
	// Images replaces the image verifier (a test's own registry).
	Images *imageverify.Images
	// Clock drives every loop's ticker and the workloads' times (a fake
	// clock steps them in tests). Default: the real clock.
	Clock clock.WithTicker
	// AppTransport reaches notebooks' apps behind /w/{id}/ (a test's
	// stand-in for an app kwok cannot run). Default: their cluster addresses.
	AppTransport http.RoundTripper
	// DevSigningKey signs the development OpenID provider's tokens (tests
	// share one key). Default: a new key per start.
	DevSigningKey *rsa.PrivateKey
	// DataDir keeps the development image-signing and audit-checkpoint
	// keys (a test's own directory, without changing the process's
	// environment). Default: config.DataDir().
	DataDir string
	// RunReviewer reviews training runs' tokens instead of the cluster's
	// TokenReview (a test without a cluster). Default: the cluster's.
	RunReviewer runs.Reviewer
	// LogOutput takes the server's log lines (a test's own output, shown
	// beside its failure). Default: standard error. Libraries that log on
	// their own still log where UseLogger sent them.
	LogOutput io.Writer
}

// seed loads the starter template catalog into an empty database.
func (s *Server) seed(ctx context.Context) error {
	dir := s.Config.TemplatesDir
	files, err := template.LoadDir(dir, s.Catalog.Classes(), s.Images.Catalog)
	if err != nil {
		s.Log.Warn("initial template catalog not loaded", "dir", dir, "err", err)
		return nil
	}
	seeded, err := s.Catalog.Seed(ctx, "gantry:initial-catalog", files)
	if err != nil {
		return fmt.Errorf("load initial template catalog: %w", err)
	}
	if seeded {
		s.Log.Info("loaded initial template catalog", "dir", dir, "templates", len(files))
	}
	return nil
}

// URL is where the server listens (http://host:port).
func (s *Server) URL() string { return s.url }

// Issuer is the OpenID provider users sign in with.
func (s *Server) Issuer() string { return s.issuer }

// DevUsers are the development provider's users (none with an
// organisation's provider).
func (s *Server) DevUsers() []config.DevUser {
	if s.dev == nil {
		return nil
	}
	return s.Config.DevLogin.Users
}

// UseLogger makes the libraries that log on their own — to slog's default
// logger (the OpenID provider) or to klog (client-go: leader election,
// informers) — log to log (the configuration's, cfg.Logger()). It sets
// process-wide state that client-go's goroutines read: commands call it
// once, first, before any cluster client starts; tests running several
// servers do not. Libraries' info lines are dropped: the OpenID provider
// logs one per device-flow poll ("authorization_pending", once a second
// while a person signs in).
func UseLogger(log *slog.Logger) {
	slog.SetDefault(slog.New(logctx.AtLeast(log.Handler(), slog.LevelWarn)))
	klog.SetSlogLogger(log)
}

// Run serves until ctx ends, with every background loop; it returns after all
// of them have stopped, a last audit checkpoint is written, and the store is
// closed.
func (s *Server) Run(ctx context.Context) error {
	defer s.Store.Close()
	cfg := s.Config
	s.Log.Info("gantry is serving", "url", s.url, "database", cfg.Database.Driver,
		"dsn", cfg.Database.DSN, "kubeconfig", cfg.Kubeconfig, "issuer", s.issuer)
	// Requests run on a context of their own, ended only if they outlast
	// the shutdown's grace period.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	s.http.BaseContext = func(net.Listener) context.Context { return base }
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := s.http.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	g.Go(func() error {
		<-gctx.Done()
		s.Log.Info("shutting down")
		s.live.CloseAll() // streams and sockets end now, not at the grace period's end
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			// Requests still running (a followed log): end them, so that
			// nothing uses the store after Run closes it.
			s.Log.Warn("requests still running after 10 s; ending them", "err", err)
			cancelBase()
			s.http.Close()
		}
		return nil
	})
	g.Go(func() error {
		// New loaded the policy: the first reload is one interval on.
		return s.everyAfter(gctx, 3*time.Second, s.reload("policy", func() error {
			if err := s.authz.Reload(); err != nil {
				return err
			}
			s.live.Publish(live.Change{Kind: live.All}) // what a binding allowed may be gone
			return nil
		}, authz.ErrUnchanged))
	})
	if s.cert != nil {
		g.Go(func() error { return s.cert.Run(gctx, certReload) })
	}
	// Every replica follows the change feed for its own live connections.
	g.Go(func() error {
		return s.live.Follow(gctx, s.Store.Feed, s.Store.DB.ChangeSignal(), feedInterval, feedKeep)
	})
	g.Go(func() error { return s.live.Run(gctx, liveSweep) })
	g.Go(func() error {
		return s.every(gctx, 3*time.Second, s.reload("image catalog", s.Images.Catalog.Reload, imagecat.ErrUnchanged))
	})
	g.Go(func() error {
		return s.every(gctx, 3*time.Second, s.reload("GPU classes", func() error { return s.reloadClasses(gctx, s.clock.Now()) }, errClassesUnchanged))
	})
	g.Go(func() error {
		return s.every(gctx, 3*time.Second, s.reload("platform edits", func() error { return s.loadOverlay(gctx) }, errOverlayUnchanged))
	})
	g.Go(func() error {
		// Not at start: a flush then would close a window the first requests
		// may already have opened, and write their kind in full twice.
		started := false
		return s.every(gctx, cfg.Audit.Window(), func(ctx context.Context) {
			if started {
				s.denials.Run(ctx)
			}
			started = true
		})
	})
	if s.checkpoints != nil {
		g.Go(func() error { return s.every(gctx, cfg.Audit.Interval(), s.checkpoints.Run) })
	}
	// Every replica rolls up and prunes: both are idempotent, and a period
	// rolled up twice is written alike.
	g.Go(func() error { return s.every(gctx, telemetryInterval, s.Telemetry.Run) })
	g.Go(func() error {
		return s.every(gctx, telemetryInterval, func(ctx context.Context) {
			// Runs' metrics are rolled up as the GPU series are, and their
			// reports and rollups kept as long as the GPU series' rollups
			// (the median rule and the progress page read the reports).
			if n, err := s.Runs.RollUp(ctx, 1000); err != nil && ctx.Err() == nil {
				s.Log.Warn("run metric rollups", "err", err, "done", n)
			}
			if n, err := s.Runs.Prune(ctx, time.Duration(s.Config.Telemetry.RollupRetention), 5000); err != nil && ctx.Err() == nil {
				s.Log.Warn("progress report retention", "err", err, "deleted", n)
			}
		})
	})
	if s.cluster != nil {
		g.Go(func() error { return s.leaderLoops(gctx) })
	}
	if s.workers != nil {
		// Every replica reads the worker clusters (GET /api/v1/clusters).
		g.Go(func() error { return s.every(gctx, s.fleetInterval(workersInterval), s.readWorkers) })
	}
	if s.cluster != nil {
		// Every replica says what the node groups' machines are doing
		// (GET /api/v1/node-groups) and, for the leader's watcher, why a
		// workload waits for one.
		g.Go(func() error {
			if c := s.awaitCluster(gctx, false); c != nil {
				if err := c.RunPools(gctx); err != nil {
					s.Log.Error("node group informers stopped; workloads waiting for machines say what the scheduler says", "err", err)
				}
			}
			return nil
		})
	}
	if s.cluster != nil && cfg.CapacityInformers {
		// Every replica serves launches, whose checks and estimates read
		// the GPU nodes and their pods from these informers.
		g.Go(func() error {
			if c := s.awaitCluster(gctx, false); c != nil { // the leader's loops say why not
				// Without the informers, launches list what they read: slower,
				// not wrong, so this replica keeps serving.
				if err := c.RunCapacity(gctx); err != nil {
					s.Log.Error("GPU capacity informers stopped; launches list nodes and pods instead", "err", err)
				}
			}
			return nil
		})
	}
	err := g.Wait()
	// Sum up the denials of the last window, then sign what was appended.
	s.denials.Run(context.Background())
	if s.checkpoints != nil {
		// Best effort: sign what the last requests appended.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.checkpoints.Run(cctx)
		cancel()
	}
	return err
}

// certReload is how often the serving certificate's files are checked for
// a rotation.
const certReload = 10 * time.Second

// The change feed is read every feedInterval (so a revocation closes what it
// allowed within about that long, on every replica), and kept for feedKeep;
// every live connection is checked again every liveSweep (credentials expire
// without a change being written), a slice of them each second.
const (
	feedInterval = 250 * time.Millisecond
	feedKeep     = 10 * time.Minute
	liveSweep    = 5 * time.Minute
)

// credentialTTL is how long a token and its owner read for one request
// serve the next ones: a revocation or a user's change is forgotten as the
// feed is read (within feedInterval); this bounds it if the feed cannot be.
const credentialTTL = 5 * time.Second

// telemetryInterval is how often closed periods are rolled up and old
// telemetry is pruned.
const telemetryInterval = 30 * time.Second

// metricsSource is where workloads' series are read: Gantry's own store, or
// the Prometheus of metrics.prometheusURL.
func metricsSource(cfg config.Config, own *telemetry.Service) (telemetry.Source, string, error) {
	if cfg.Metrics.PrometheusURL == "" {
		return own, "gantry", nil
	}
	src, err := promsource.New(promsource.Options{URL: cfg.Metrics.PrometheusURL})
	if err != nil {
		return nil, "", err
	}
	return src, "prometheus", nil
}

// checkpointer signs the audit log's head with audit.checkpointKey (without
// one, in -tags dev builds, with a development key; in production builds
// with none, and says so).
func (s *Server) checkpointer() (*audit.Checkpointer, error) {
	ac := s.Config.Audit
	path := ac.CheckpointKey
	if path == "" {
		var err error
		if path, err = devCheckpointKey(s.dataDir, s.Log); err != nil {
			return nil, err
		}
	}
	if path == "" {
		s.Log.Warn("no audit.checkpointKey: audit checkpoints are off, so whoever can write the database can rewrite the audit log undetected")
		return nil, nil
	}
	key, err := audit.LoadPrivateKey(path)
	if err != nil {
		return nil, fmt.Errorf("audit.checkpointKey: %w", err)
	}
	cp, err := audit.NewCheckpointer(audit.CheckpointerOptions{Store: s.Store.Audit, Key: key, Log: s.Log, File: ac.CheckpointFile, Now: s.clock.Now})
	if err != nil {
		return nil, fmt.Errorf("audit.checkpointFile: %w", err)
	}
	s.Log.Info("audit checkpoints on", "key_id", cp.KeyID(), "interval", ac.Interval().String(), "file", ac.CheckpointFile)
	if ac.CheckpointFile == "" && !s.Log.Enabled(context.Background(), slog.LevelInfo) {
		s.Log.Warn("audit checkpoints are logged at level info, which log.level drops, and audit.checkpointFile is not set: they are kept in the database only, where a rewrite can delete them",
			"log.level", s.Config.Log.Level)
	}
	return cp, nil
}

// reload picks up edited files (the policy, the image catalog); a broken edit
// keeps what is in force and is logged with file:line.
func (s *Server) reload(what string, reload func() error, unchanged error) func(context.Context) {
	return func(context.Context) {
		switch err := reload(); {
		case err == nil:
			s.Log.Info(what + " reloaded")
		case !errors.Is(err, unchanged):
			s.Log.Error(what+" not reloaded; the previous one stays in force", "err", err)
		}
	}
}

// every calls fn at once and then every interval of the server's clock until
// ctx ends.
func (s *Server) every(ctx context.Context, interval time.Duration, fn func(context.Context)) error {
	fn(ctx)
	return s.everyAfter(ctx, interval, fn)
}

// everyAfter calls fn every interval of the server's clock until ctx ends,
// the first time one interval on.
func (s *Server) everyAfter(ctx context.Context, interval time.Duration, fn func(context.Context)) error {
	t := s.clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		fn(ctx)
	}
}

// leaderLoops waits for the kubeconfig to load, then runs the loops that must
// run once across replicas (the workload controller and the lifecycle loop)
// whenever this replica holds the Lease.
func (s *Server) leaderLoops(ctx context.Context) error {
	c := s.awaitCluster(ctx, true)
	if c == nil {
		return nil
	}
	host, _ := os.Hostname()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	lease := lead.Lease{Namespace: s.Config.Namespace, Name: "gantry-leader", Identity: host + "-" + hex.EncodeToString(suffix), Duration: s.Config.Lease()}
	return c.Lead(ctx, lease, func(ctx context.Context) {
		s.Log.Info("leading: running the workload controller and the lifecycle loop", "lease", lease.Namespace+"/"+lease.Name, "identity", lease.Identity)
		if err := s.lead(ctx, c); err != nil && ctx.Err() == nil {
			s.Log.Error("leader loops stopped", "err", err)
		}
		s.Log.Info("no longer leading", "identity", lease.Identity)
	})
}

// awaitCluster is the cluster once its kubeconfig loads: a kubeconfig that
// is missing or broken is tried again every interval (saying why, when
// warn). Nil when ctx ends first.
func (s *Server) awaitCluster(ctx context.Context, warn bool) *kube.Cluster {
	for {
		c, err := s.cluster.Cluster()
		if err == nil {
			return c
		}
		if warn {
			s.Log.Warn("kubernetes API server not reachable", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(s.Config.Reconcile()):
		}
	}
}

// lead runs the controller and the lifecycle loop until ctx ends (leadership
// lost or shutdown), and waits for both.
func (s *Server) lead(ctx context.Context, c *kube.Cluster) error {
	w, err := c.Watcher(10 * time.Minute)
	if err != nil {
		return err
	}
	ctl, err := controller.New(w, s.Workloads, controller.Options{Log: s.Log, Clock: s.clock, Queues: s.own.Queues()})
	if err != nil {
		return err
	}
	// A record changed by anyone (on any replica, as the change feed says)
	// hears the cluster's next observation, even one the controller has
	// just recorded.
	defer s.live.OnWorkloadChange(ctl.Forget)()
	culler, err := cull.New(cull.Options{Store: s.Store.Workloads, Templates: s.Catalog, Stopper: s.Workloads, Progress: s.Runs, Kernels: s.kernels, Settings: s.Store.Governance, Log: s.Log, Now: s.clock.Now})
	if err != nil {
		return err
	}
	// Every part is built before any loop starts: a lead that fails to build
	// has nothing to wait for.
	var quotas *quota.Syncer
	var fleetSide *workers.Manager      // the manager's side of the worker clusters
	var dispatcher *dispatch.Dispatcher // nominates a worker for each Workload
	if s.Config.Quota.Kueue {
		qo := quota.SyncerOptions{Policy: func() quota.Policy { return s.authz.Policy() }, Classes: s.Catalog.Classes(),
			Kueue: c.Kueue(), Holds: s.Budgets, Priorities: priorities, Log: s.Log}
		if s.workers != nil {
			if fleetSide, err = workers.NewManager(workers.ManagerOptions{Workers: s.workers, Cluster: c, KueueNamespace: s.Config.Quota.KueueNamespace,
				Policy: qo.Policy, Classes: qo.Classes, Priorities: priorities}); err != nil {
				return err
			}
			qo.Fleet = fleetSide.Workers
			if dispatcher, err = dispatch.New(dispatch.Options{Manager: c.Dynamic(), Fleet: s.Fleet, Classes: s.Catalog.Classes(), Workers: s.workers, Check: quota.FleetCheck, Stage: fleetSide, Intensity: s.intensity, PUE: s.pue, Now: s.clock.Now, Log: s.Log}); err != nil {
				return err
			}
		}
		if quotas, err = quota.NewSyncer(qo); err != nil {
			return err
		}
	}
	// Warm capacity runs wherever Karpenter scales the groups, warmed or
	// not: a group no longer warmed has its placeholders released.
	var warmer *capacity.Warmer
	ph, err := c.Placeholders(s.Config.Namespace)
	if err != nil {
		return err
	}
	if ph != nil {
		if warmer, err = capacity.NewWarmer(s.capacity, ph, s.Store.Workloads, warmInterval, s.Log); err != nil {
			return err
		}
	}
	sizes, err := c.Sizes()
	if err != nil {
		return err
	}
	var quarantined *quarantine.Quarantine
	if tc := s.Config.Telemetry; tc.Quarantine != "off" {
		pf := nodes.PreflightOptions{Namespace: s.Config.Namespace, Image: tc.PreflightImage, Command: tc.PreflightCommand, RuntimeClass: tc.PreflightRuntimeClass}
		if quarantined, err = quarantine.New(quarantine.Options{Cluster: c.Quarantine(pf), Health: s.Telemetry, Workloads: s.Store.Workloads,
			Store: s.Store.Governance, Audit: s.Store.Audit, Resumes: s.Runs, Effect: tc.Quarantine, Clean: time.Duration(tc.QuarantineClean), Move: tc.Move,
			Namespace: func(t team.Name) string { return s.Config.NamespacePrefix + t.String() }, Now: s.clock.Now, Log: s.Log}); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	if quarantined != nil {
		g.Go(func() error {
			return s.every(gctx, quarantineInterval, func(ctx context.Context) {
				n, err := quarantined.Pass(ctx)
				s.own.Loop(ownmetrics.Quarantine, n)
				if err != nil && ctx.Err() == nil {
					s.Log.Warn("quarantine", "acted", n, "err", err)
				}
			})
		})
	}
	g.Go(func() error { return ctl.Run(gctx) })
	if sizes != nil {
		// The node groups' max and quiet time, edited through the API, reach
		// their NodePools within an interval.
		g.Go(func() error {
			return s.every(gctx, sizesInterval, func(ctx context.Context) {
				if err := sizes.Sync(ctx); err != nil && ctx.Err() == nil {
					s.Log.Warn("node group sizes", "err", err)
				}
			})
		})
	}
	if warmer != nil {
		g.Go(func() error {
			return s.every(gctx, warmInterval, func(ctx context.Context) {
				if err := warmer.Pass(ctx); err != nil && ctx.Err() == nil {
					s.Log.Warn("warm capacity", "err", err)
				}
			})
		})
	}
	objs := c.Objects(w)
	g.Go(func() error {
		return s.every(gctx, s.Config.Reconcile(), func(ctx context.Context) { s.lifecycle(ctx, objs) })
	})
	g.Go(func() error {
		return s.every(gctx, s.Config.Reconcile(), func(ctx context.Context) {
			n, err := culler.Run(ctx)
			s.own.Loop(ownmetrics.IdleStops, n)
			if err != nil && ctx.Err() == nil {
				s.Log.Warn("idle culling", "err", err)
			}
		})
	})
	g.Go(func() error {
		return s.every(gctx, s.Config.Reconcile(), func(ctx context.Context) {
			n, err := s.Budgets.Run(ctx)
			s.own.Loop(ownmetrics.BudgetAlerts, n)
			if err != nil && ctx.Err() == nil {
				s.Log.Warn("budget alerts", "sent", n, "err", err)
			}
		})
	})
	g.Go(func() error {
		return s.every(gctx, notifyInterval, func(ctx context.Context) {
			n, err := s.notifier.Run(ctx)
			s.own.Loop(ownmetrics.WebhooksSent, n)
			if err != nil && ctx.Err() == nil {
				s.Log.Warn("webhooks", "err", err)
			}
		})
	})
	if quotas != nil {
		g.Go(func() error {
			return s.every(gctx, s.Config.Reconcile(), func(ctx context.Context) {
				applied, err := quotas.Run(ctx)
				switch {
				case err == nil || ctx.Err() != nil:
				case applied:
					s.Log.Error("quotas: Kueue objects applied, but Gantry's AdmissionCheck not marked active", "err", err)
				default:
					s.Log.Error("quotas: Kueue objects not synced", "err", err)
				}
			})
		})
		g.Go(func() error {
			return c.Kueue().RunQueueController(gctx, w.KueueWorkloads(), s.Config.NamespacePrefix, s.Workloads.Admission, s.Config.Reconcile(), s.Log)
		})
	}
	if fleetSide != nil {
		g.Go(func() error {
			return s.every(gctx, s.fleetInterval(workersInterval), func(ctx context.Context) {
				if err := fleetSide.Pass(ctx); err != nil && ctx.Err() == nil {
					s.Log.Error("worker clusters: credentials or queues not synced", "err", err)
				}
			})
		})
		g.Go(func() error {
			return s.every(gctx, s.fleetInterval(vmInterval), func(ctx context.Context) {
				if err := fleetSide.SyncVMs(ctx); err != nil && ctx.Err() == nil {
					s.Log.Warn("worker clusters: VMs not synced", "err", err)
				}
			})
		})
		g.Go(func() error {
			return s.every(gctx, s.fleetInterval(dispatchInterval), func(ctx context.Context) {
				n, err := dispatcher.Round(ctx)
				s.own.Loop(ownmetrics.Dispatched, n)
				if err != nil && ctx.Err() == nil {
					s.Log.Warn("dispatch", "nominated", n, "err", err)
				}
			})
		})
	}
	return g.Wait()
}

// readWorkers reads the worker clusters once and says, for the operator,
// which went down (an API server gone, credentials refused: expired tokens
// are the known way MultiKueue setups stall) and which came back.
func (s *Server) readWorkers(ctx context.Context) {
	before, _ := s.workers.States()
	s.workers.Pass(ctx)
	after, _ := s.workers.States()
	for name, st := range after {
		s.own.WorkerUp(name, st.Reachable)
		was, seen := before[name]
		switch {
		case !st.Reachable && (!seen || was.Reachable || was.Why != st.Why):
			s.Log.Error("worker cluster cannot be read: no new work goes there", "cluster", name, "why", st.Why)
		case st.Reachable && seen && !was.Reachable:
			s.Log.Info("worker cluster read again", "cluster", name)
		}
	}
}

// fleetInterval is how often a fleet's loop runs: d, or the reconcile
// interval where that is shorter (an operator who asks for quicker
// convergence gets it from these loops too; the tests run them every
// second).
func (s *Server) fleetInterval(d time.Duration) time.Duration {
	if r := s.Config.Reconcile(); r > 0 && r < d {
		return r
	}
	return d
}

// workersInterval is how often the worker clusters are read.
const workersInterval = 10 * time.Second

// vmInterval is how often the fleet's VMs are synced on their workers
// (workers.Manager.SyncVMs): a VM starts on its worker within this of the
// worker's admission.
const vmInterval = 2 * time.Second

// dispatchInterval is how often the manager's waiting Workloads are
// nominated to worker clusters: a dispatch round.
const dispatchInterval = 5 * time.Second

// warmInterval is how often warm capacity is sized again.
const warmInterval = time.Minute

// sizesInterval is how often the node groups' max and quiet time are
// compared with what their NodePools were last given.
const sizesInterval = 10 * time.Second

// quarantineInterval is how often the GPU nodes' health is acted on: nodes
// with a failed GPU marked, the work on it moved, healthy ones released.
const quarantineInterval = 5 * time.Second

// notifyInterval is how often the webhook outbox is looked at.
const notifyInterval = 5 * time.Second

// priorities are the template priorities, the PriorityClasses of
// deploy/priorityclasses.yaml (gantry-<priority>), as Kueue sees them.
var priorities = func() []quota.Priority {
	var out []quota.Priority
	for _, p := range deploy.Priorities {
		out = append(out, quota.Priority{Name: p.Name, Value: p.Value})
	}
	return out
}()

// lifecycle is one pass of the lifecycle loop: release flexible launches
// whose cleanest window has come, apply recorded launches that
// are not on the cluster yet (a crash mid-launch, a cluster that was away),
// stop what ran past its max runtime, and converge stopped, started and
// deleted workloads' objects, as on lists them (the leader's cache of Jobs,
// the API server for the rest).
func (s *Server) lifecycle(ctx context.Context, on workload.Objects) {
	// Flexible launches whose cleanest window has come go first: released
	// and applied (one the cluster does not take now, by Reconcile next).
	released, rerr := s.Workloads.ReleaseDeferred(ctx)
	s.own.Loop(ownmetrics.Released, released)
	if released > 0 || (rerr != nil && ctx.Err() == nil) {
		s.Log.Info("released flexible launches at their cleanest window", "released", released, "err", rerr)
	}
	n, err := s.Workloads.Reconcile(ctx)
	s.own.Loop(ownmetrics.Applied, n)
	if n > 0 {
		s.Log.Info("reconciled workloads", "applied", n)
	}
	// Expired approvals are refused whether or not the cluster answers.
	expired, eerr := s.Workloads.ExpireApprovals(ctx)
	s.own.Loop(ownmetrics.ApprovalsExpired, expired)
	if expired > 0 || (eerr != nil && ctx.Err() == nil) {
		s.Log.Info("refused launches whose approval expired", "refused", expired, "err", eerr)
	}
	var un *fault.Unavailable
	if err != nil && ctx.Err() == nil {
		s.Log.Warn("reconcile", "err", err)
		if errors.As(err, &un) {
			return // the cluster is away: nothing else can be done now
		}
	}
	stopped, serr := s.Workloads.Expire(ctx)
	s.own.Loop(ownmetrics.Expired, stopped)
	if stopped > 0 || (serr != nil && ctx.Err() == nil) {
		s.Log.Info("stopped workloads past their max runtime", "stopped", stopped, "err", serr)
	}
	actions, err := s.Workloads.Converge(ctx, on, s.Config.RemoveOrphans)
	for _, a := range actions {
		if a.Done {
			s.Log.Info("converged a workload's objects", "object", a.Object.String(), "workload_id", a.Object.WorkloadID, "did", a.Do, "why", a.Why)
		} else {
			s.Log.Warn("object carries Gantry's labels but belongs to no live workload", "object", a.Object.String(), "workload_id", a.Object.WorkloadID, "removed", false)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.Log.Warn("converging workloads' objects", "err", err)
	}
}

// signInProvider is the configured OpenID provider or, without one, the
// development provider (in builds with -tags dev; see devmode.go).
func (s *Server) signInProvider(ctx context.Context, public string, devKey *rsa.PrivateKey) (config.OIDC, error) {
	cfg := s.Config
	oc := cfg.OIDC
	if oc.Issuer != "" {
		return oc, nil
	}
	oc, dev, err := devSignIn(ctx, cfg, public, devKey, s.Log)
	if err != nil {
		return oc, err
	}
	s.dev = dev
	return oc, nil
}
