package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/clock"

	gantry "github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/advice"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/capacity"
	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/estimate"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/dispatch"
	"github.com/gantryhq/gantry/internal/kube/workers"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/ownmetrics"
	"github.com/gantryhq/gantry/internal/projected"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/tlsfiles"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/trial"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/portal"
)

// New builds Gantry from the configuration and binds its listener; Run
// serves. It runs in phases, each building on the ones before: the core
// (store, catalogs), governance (policy, edits, audit, budgets), the
// workload service (and the cluster), telemetry and advice, the listener,
// sign-in, and the HTTP handler. On error everything New started is
// stopped again.
func New(ctx context.Context, cfg config.Config, ov Overrides) (*Server, error) {
	clk := ov.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	dataDir := ov.DataDir
	if dataDir == "" {
		dataDir = config.DataDir()
	}
	log := cfg.Logger()
	if ov.LogOutput != nil {
		log = cfg.LoggerTo(ov.LogOutput)
	}
	core, err := open(ctx, cfg, log, ov.Images, clk.Now, dataDir)
	if err != nil {
		return nil, err
	}
	s := &Server{Core: core, clock: clk, own: ownmetrics.New(), dataDir: dataDir}
	if v := core.Images.Verifier; v != nil {
		s.own.ImageCache(v.CacheHits, v.CacheMisses)
	}
	var w wiring
	for _, phase := range []func() error{
		func() error { return s.governance(ctx) },
		s.workloadService,
		func() error { return s.telemetryAndAdvice(ov, &w) },
		s.listen,
		func() error { return s.signIn(ctx, ov, &w) },
		func() error { return s.handler(ov, &w) },
	} {
		if err := phase(); err != nil {
			if s.ln != nil {
				s.ln.Close()
			}
			core.Store.Close()
			return nil, err
		}
	}
	return s, nil
}

// wiring is what one phase of New hands a later one, beyond the Server's
// own fields.
type wiring struct {
	agents            api.AgentAuthenticator
	runTokens         api.RunAuthenticator
	series            *telemetry.Reader
	advice            *advice.Service
	public            string // the URL people reach Gantry at
	signIn            config.OIDC
	portalScopes      []string // what the portal's sign-in asks for
	cliScopes         []string // what the CLI is told to ask for (GET /auth/config)
	sessions          *weblogin.Service
	identify, recheck func(*http.Request) (identity.Identity, error)
}

// governance: the starter catalog, the policy with the platform team's
// edits over it, the audit log's checkpoints and denial counts, the budgets
// and their webhooks.
func (s *Server) governance(ctx context.Context) (err error) {
	if err := s.seed(ctx); err != nil {
		return err
	}
	policyFiles := authz.InDir(s.Config.PolicyDir)
	policyFiles.Classes = s.Catalog.Classes()
	if s.authz, err = authz.New(policyFiles); err != nil {
		return err
	}
	// The platform team's edits through the API, laid over the files; the
	// classes' prices as they are then join their history.
	if s.overlays, err = overlay.New(overlay.Options{Store: s.Store.Governance, Authz: s.authz, Classes: s.Catalog.Classes(), NodeGroups: s.fileGroups, Fleet: s.fileFleet, Apply: s.applyOverlay, Now: s.clock.Now}); err != nil {
		return err
	}
	if err := s.loadOverlay(ctx); err != nil {
		return err
	}
	if s.checkpoints, err = s.checkpointer(); err != nil {
		return err
	}
	if s.denials, err = audit.NewAggregator(audit.AggregatorOptions{Store: s.Store.Audit, Now: s.clock.Now, Log: s.Log}); err != nil {
		return err
	}
	if s.carbon, err = carbonSource(s.Config, s.clock.Now); err != nil {
		return err
	}
	meter, err := workload.NewMeter(workload.MeterOptions{Store: s.Store.Workloads, Templates: s.Catalog, Now: s.clock.Now, PUE: s.pue, Carbon: s.carbon, Location: s.location})
	if err != nil {
		return err
	}
	if s.Budgets, err = budget.New(budget.Options{Rules: s.authz, Readers: s.authz, Spender: meter, Store: s.Store.Governance, Log: s.Log, Now: s.clock.Now}); err != nil {
		return err
	}
	n := s.Config.Notify
	s.notifier, err = notify.NewSender(notify.Options{Outbox: s.Store.Governance, URL: string(n.WebhookURL), Secret: []byte(n.WebhookSecret), Log: s.Log, Now: s.clock.Now})
	return err
}

// workloadService: the cluster (loaded lazily: with the kubeconfig missing
// or the API server away, Gantry still serves, /readyz says why it is not
// ready, and launches are kept and applied once the cluster answers) and
// the workload service over it; the readiness checks.
func (s *Server) workloadService() (err error) {
	cfg := s.Config
	s.checks = []api.Check{{Name: "database", Pinger: s.Store.DB}}
	wo := workload.Options{PUE: s.pue, Carbon: s.carbon, Forecast: s.carbon, Location: s.location, Store: s.Store.Workloads, Templates: s.Catalog, Authorizer: s.authz, Images: s.Images, Budgets: s.Budgets, NodeGroups: s.NodeGroups,
		Namespace: func(t team.Name) string { return cfg.NamespacePrefix + t.String() }, KBSURL: cfg.Confidential.KBSURL, Kueue: cfg.Quota.Kueue, RunURL: cfg.RunReportURL(), Log: s.Log, Now: s.clock.Now}
	// Worker clusters: read from every replica; with Kueue, the cluster is
	// their MultiKueue manager and Jobs run on them.
	var remote kube.Workers
	if len(s.Fleet.Clusters()) > 0 {
		if s.workers, err = workers.New(workers.Options{Fleet: s.Fleet, Classes: s.Catalog.Classes()}); err != nil {
			return err
		}
		if cfg.Quota.Kueue && cfg.Kubeconfig != "" {
			wo.Fleet, wo.Sites, remote = true, s.sites, s.workers
		}
	}
	if cfg.Kubeconfig == "" {
		s.Log.Warn("no kubeconfig: launches are recorded and rendered, not applied to a cluster")
	} else {
		if s.cluster, err = kube.NewLazy(kube.LazyOptions{Kubeconfig: cfg.Kubeconfig, Cluster: kube.Options{Kueue: cfg.Quota.Kueue, Observer: s.own, Queues: s.own.Queues(),
			NodeGroups: s.NodeGroups, Classes: s.Catalog.Classes(), Now: s.clock.Now, Workers: remote}}); err != nil {
			return err
		}
		wo.Cluster = s.cluster
		s.checks = append(s.checks, api.Check{Name: "kubernetes", Pinger: s.cluster})
		if cfg.Quota.Kueue {
			s.checks = append(s.checks, api.Check{Name: "kueue", Pinger: s.cluster.Kueue()})
		}
	}
	s.Workloads, err = workload.New(wo)
	return err
}

// telemetryAndAdvice: ingest (with the online advice rules on every batch
// this replica ingests), the agents' authentication, the series reader and
// the advice service.
func (s *Server) telemetryAndAdvice(ov Overrides, w *wiring) error {
	cfg := s.Config
	online, err := advice.NewLive(advice.LiveOptions{Classes: s.Catalog.Classes(), Log: s.Log, Lookup: func(ctx context.Context, id string) (string, string, error) {
		w, err := s.Store.Workloads.Workload(ctx, id)
		return w.Template, w.GPUClass, err
	}})
	if err != nil {
		return err
	}
	tc := cfg.Telemetry
	to := telemetry.Options{Store: s.Store.Telemetry, Observer: online,
		WorkloadNamespace: func(ctx context.Context, id string) (string, error) {
			w, err := s.Store.Workloads.Workload(ctx, id)
			return cfg.NamespacePrefix + w.Team.String(), err
		}, RawRetention: time.Duration(tc.RawRetention), RollupRetention: time.Duration(tc.RollupRetention),
		XIDHold: time.Duration(tc.XIDHold), Now: s.clock.Now, Log: s.Log}
	// One budget of TokenReviews for the agents' and the runs' tokens: 20
	// a second, 100 at once, and from one source (an address, an IPv6 /64)
	// one a second, 20 at once — far above what a fleet's new tokens need
	// (each is then cached, and agents' rotate hourly), and a bound on what
	// made-up ones cost the API server.
	reviews := projected.NewBudget(projected.BudgetOptions{Rate: 20, Burst: 100, SourceRate: 1, SourceBurst: 20, Now: s.clock.Now})
	runReviewer := ov.RunReviewer
	if s.cluster != nil {
		kt := kube.Telemetry{Lazy: s.cluster}
		to.Pods, to.Health = kt, kt
		w.agents = &telemetry.AgentAuth{Reviewer: kt, Audience: tc.Audience, ServiceAccount: tc.ServiceAccount, Now: s.clock.Now, Reviews: reviews}
		if runReviewer == nil {
			runReviewer = kube.Runs{Lazy: s.cluster}
		}
	}
	if runReviewer != nil {
		w.runTokens = &runs.TokenAuth{Reviewer: runReviewer, Now: s.clock.Now, Reviews: reviews}
	}
	if s.Runs, err = runs.New(runs.Options{Store: s.Store.Runs, Notifier: s.Store.Governance, Now: s.clock.Now, Log: s.Log, RawRetention: time.Duration(tc.RawRetention),
		Workloads: runWorkloads{svc: s.Workloads, records: s.Store.Workloads, templates: s.Catalog, now: s.clock.Now}}); err != nil {
		return err
	}
	if s.Trials, err = trial.New(trial.Options{Store: s.Store.Workloads, Workloads: s.Workloads, Records: s.Store.Workloads, Reports: s.Store.Runs,
		Authorizer: s.authz, Now: s.clock.Now, NewID: workload.NewID, Log: s.Log}); err != nil {
		return err
	}
	if s.Telemetry, err = telemetry.New(to); err != nil {
		return err
	}
	metrics, metricsSource, err := metricsSource(cfg, s.Telemetry)
	if err != nil {
		return err
	}
	if w.series, err = telemetry.NewReader(telemetry.ReaderOptions{Source: metrics, Energy: s.Telemetry, SourceName: metricsSource, Now: s.clock.Now,
		Target: func(ctx context.Context, id string) (telemetry.Target, error) {
			wl, err := s.Workloads.Get(ctx, id) // the caller may read it, or 404
			return telemetry.Target{ID: wl.ID, Namespace: s.Workloads.Namespace(wl), Name: wl.Name}, err
		}}); err != nil {
		return err
	}
	w.advice, err = advice.New(advice.Options{Source: metrics, Classes: s.Catalog.Classes(), Templates: s.Catalog, Workloads: s.Workloads, Live: online, Health: s.Telemetry.Unhealthy, Run: s.adviceRun, Used: s.Store.Workloads.WorkloadActivity, Now: s.clock.Now})
	return err
}

// listen binds the listener, with TLS when a certificate is configured.
func (s *Server) listen() error {
	cfg := s.Config
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.ln, s.url = ln, "http://"+ln.Addr().String()
	if cfg.TLS.CertFile == "" {
		return nil
	}
	if s.cert, err = tlsfiles.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile, s.clock.Now, s.Log); err != nil {
		return err
	}
	tc, err := s.cert.ServerConfig(cfg.TLS.MinVersion)
	if err != nil {
		return err
	}
	s.ln, s.url = tls.NewListener(ln, tc), "https://"+ln.Addr().String()
	return nil
}

// signIn: the OpenID provider (the configured one, or the development
// one), bearer tokens, users, browser sessions and personal access tokens.
func (s *Server) signIn(ctx context.Context, ov Overrides, w *wiring) (err error) {
	cfg := s.Config
	if w.public = strings.TrimSuffix(cfg.PublicURL, "/"); w.public == "" {
		w.public = s.url
	}
	oc, err := s.signInProvider(ctx, w.public, ov.DevSigningKey)
	if err != nil {
		return err
	}
	an, err := authn.New(ctx, authn.Config{Issuer: oc.Issuer, Audiences: oc.Audiences, ClockSkew: oc.Skew(), Now: s.clock.Now,
		Claims:       authn.Claims{Subject: oc.SubjectClaim, Email: oc.EmailClaim, Name: oc.NameClaim, Groups: oc.GroupsClaim},
		SecondFactor: authn.SecondFactor{AMR: oc.SecondFactorAMR, ACR: oc.SecondFactorACR}})
	if err != nil {
		return err
	}
	// The provider's own spelling of its issuer (a trailing slash may
	// differ from the configured one): users are keyed on it.
	oc.Issuer = an.Issuer()
	s.issuer, w.signIn = oc.Issuer, oc
	if s.users, err = user.New(user.Options{Store: s.Store.Accounts, MaxGroupAge: time.Duration(cfg.MaxGroupAge), Now: s.clock.Now}); err != nil {
		return err
	}
	// Configured scopes are asked for as they are; otherwise what the
	// provider's discovery says it supports (authn.Scopes).
	w.portalScopes, w.cliScopes = oc.Scopes, oc.Scopes
	if len(oc.Scopes) == 0 {
		w.portalScopes, w.cliScopes = an.Scopes(false), an.Scopes(true)
	}
	if w.sessions, err = weblogin.New(weblogin.Options{Config: weblogin.Config{ClientID: oc.ClientID, ClientSecret: string(oc.ClientSecret), RedirectURL: w.public + "/auth/callback",
		Scopes: w.portalScopes, Endpoint: an.Endpoint(), Lifetime: cfg.Session(), ACRValues: oc.ACRValues}, Verifier: an, Store: s.Store.Accounts, Users: s.users, Now: s.clock.Now}); err != nil {
		return err
	}
	if s.tokens, err = token.New(token.Options{Store: s.Store.Accounts, Owners: s.users, Teams: s.authz, Now: s.clock.Now}); err != nil {
		return err
	}
	bearer := an.Identify
	if ov.Identify != nil {
		bearer = ov.Identify
	}
	// The API records a provider token's user itself (api.Options.Users),
	// telling a refused token from a failure to record.
	w.identify = bearer
	// Checking an open stream's JWT again records nothing: the token is
	// verified again and its user must still be active.
	w.recheck = func(r *http.Request) (identity.Identity, error) {
		id, err := bearer(r)
		if err != nil {
			return id, err
		}
		return id, s.users.Active(r.Context(), id)
	}
	return nil
}

// handler: the services only the API uses (estimates, team settings, live
// streams), the portal, and the API in front of them all.
func (s *Server) handler(ov Overrides, w *wiring) error {
	cfg := s.Config
	if ov.Checks != nil {
		s.checks = ov.Checks
	}
	eo := estimate.Options{Previewer: s.Workloads, Quotas: s.authz, Budgets: s.Budgets, Kueue: cfg.Quota.Kueue}
	if s.cluster != nil {
		eo.Cluster = s.cluster
	}
	estimates, err := estimate.New(eo)
	if err != nil {
		return err
	}
	settings, err := overrides.New(overrides.Options{Store: s.Store.Governance, Authz: s.authz, Now: s.clock.Now, Template: func(ctx context.Context, name string) (*template.Template, error) {
		v, err := s.Catalog.Get(ctx, name, 0)
		return v.Template, err
	}})
	if err != nil {
		return err
	}
	if s.live, err = live.New(live.Options{Limits: live.Limits{PerIdentity: int(cfg.Security.StreamsPerIdentity), PerReplica: int(cfg.Security.StreamsPerReplica)}, Log: s.Log, Now: s.clock.Now}); err != nil {
		return err
	}
	// A token and its owner, or a session and its user, read for a
	// request, are kept a few seconds;
	// what the change feed says changed (Run follows it) is forgotten.
	s.Store.Accounts.CacheCredentials(credentialTTL)
	s.live.OnChange(s.Store.Accounts.Forget)
	pages, err := portal.New(portal.Options{Now: s.clock.Now, Sessions: w.sessions, Teams: s.authz.Teams, Secure: strings.HasPrefix(w.public, "https://"), Logger: s.Log, Audit: s.denials})
	if err != nil {
		return err
	}
	var pools capacity.Pools = capacity.NoPools{}
	if s.cluster != nil {
		pools = s.cluster
	}
	capa, err := capacity.New(capacity.Options{NodeGroups: s.NodeGroups, Pools: pools, Launches: s.Store.Workloads, Classes: s.Catalog.Classes(), Now: s.clock.Now})
	if err != nil {
		return err
	}
	s.capacity = capa
	var watch fleet.Watch = fleet.NoWatch{}
	if s.workers != nil {
		watch = s.workers
	}
	oc := w.signIn
	var appWorkers interactive.Workers
	if s.workers != nil {
		appWorkers = s.workers
	}
	apps := ov.AppTransport
	if apps == nil && cfg.AppDial == config.AppDialEndpoints && s.cluster != nil {
		apps = interactive.NewTransport(s.cluster.DialService)
	}
	if s.kernels, err = interactive.NewKernels(s.Workloads, apps, appWorkers); err != nil {
		return err
	}
	h, err := api.New(api.Options{Transient: store.Unavailable,
		Now:     s.clock.Now,
		Live:    s.live,
		Catalog: s.Catalog, Workloads: s.Workloads, Estimates: estimates, Budgets: s.Budgets, Capacity: capa, Fleet: s.Fleet, Workers: watch, Quotas: s.authz, Settings: settings, Edits: s.overlays, Prices: s.Store.Governance.PriceHistory, Own: s.own, Checks: s.checks, Spec: gantry.OpenAPI,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxConcurrentReads: int(cfg.MaxConcurrentReads), Logger: s.Log, LogDrain: time.Duration(cfg.LogDrain),
		Portal:   pages,
		Identify: w.identify, RecheckBearer: w.recheck, Sessions: w.sessions, Tokens: s.tokens, Users: s.users, Teams: s.authz.Teams,
		SignIn:    model.AuthConfig{Issuer: oc.Issuer, CliClientID: oc.CLIClientID, Scopes: w.cliScopes},
		Authorize: s.authz.AllowedSomewhere, RolesWith: s.authz.RolesWith, NeedsSecondFactor: s.authz.NeedsSecondFactor, Audit: s.denials, Images: s.Images,
		AppTransport: apps, AppWorkers: appWorkers,
		Agents: w.agents, RunTokens: w.runTokens, Runs: s.Runs, Trials: s.Trials, Moves: s.Store.Governance, Telemetry: s.Telemetry, Metrics: w.series, Advice: w.advice,
		Anonymous: api.AnonymousLimit{Rate: float64(cfg.Security.AnonymousRate), Burst: int(cfg.Security.AnonymousBurst), Now: s.clock.Now},
	})
	if err != nil {
		return err
	}
	// MaxHeaderBytes: a request line and headers of 64 KiB hold any real
	// client's (an ID token with 200 groups is about 10 KiB), not Go's
	// default megabyte that each request could make Gantry read and hold.
	proxies, _ := cfg.Security.Proxies() // checked when the configuration was read
	// ErrorLog: what net/http says of a connection (a TLS handshake that
	// failed, a panic recovered) goes to Gantry's log, structured.
	s.http = &http.Server{Handler: clientaddr.Behind(h, proxies), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn)}
	return nil
}

// MaxHeaderBytes bounds a request's line and headers.
const MaxHeaderBytes = 64 << 10

// pue is the power usage effectiveness of a cluster's site: energy.pue for
// the cluster Gantry drives (""), a worker's own from the clusters file
// (that of the cluster Gantry drives when it states none).
func (s *Server) pue(cluster string) float64 {
	if cluster != "" && s.Fleet != nil {
		if c, ok := s.Fleet.Get(cluster); ok && c.PUE > 0 {
			return c.PUE
		}
	}
	return s.Config.Energy.PUE
}

// sites are the worker clusters a flexible Job may run on, read from its
// objects as the dispatcher will read its Kueue Workload: where its start
// is planned together with its cluster (workload.Options.Sites).
func (s *Server) sites(_ context.Context, objs []render.Object) ([]workload.Site, float64, error) {
	for _, o := range objs {
		job, ok := o.(*batchv1.Job)
		if !ok {
			continue
		}
		l, err := dispatch.JobLaunch(job, s.Catalog.Classes())
		if err != nil {
			return nil, 0, err
		}
		var out []workload.Site
		for _, site := range s.Fleet.Sites(l) {
			out = append(out, workload.Site{Cluster: site.Cluster, Location: site.Region, PricePerHour: site.Offer.PricePerGPUHour * l.Units(),
				PUE: s.pue(site.Cluster), KWhPerHour: l.GPUs * site.Watts / 1000})
		}
		return out, s.Fleet.CarbonPrice(), nil
	}
	return nil, 0, nil
}

// location is where a cluster's site draws its power, as the carbon source
// names it: energy.location for the cluster Gantry drives, a worker's region.
func (s *Server) location(cluster string) string {
	if cluster != "" && s.Fleet != nil {
		if c, ok := s.Fleet.Get(cluster); ok {
			return c.Region
		}
	}
	return s.Config.Energy.Location
}

// intensity is the grid's carbon intensity (gCO2e/kWh) at region in the
// hour of at, from the carbon source; false without a source or a figure.
func (s *Server) intensity(ctx context.Context, region string, at time.Time) (float64, bool) {
	if s.carbon == nil {
		return 0, false
	}
	hour := at.UTC().Truncate(time.Hour)
	// A dispatch round waits for this: a source that does not answer
	// soon leaves the round to price alone.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := s.carbon.Intensity(ctx, region, hour, hour.Add(time.Hour))
	if err != nil {
		s.Log.WarnContext(ctx, "no carbon intensity for placement: weighed by price alone", "region", region, "err", err)
		return 0, false
	}
	v, ok := m[hour]
	return v, ok && v > 0
}

// carbonSource is the grid carbon intensity source the configuration names
// (energy.carbonSDK, else energy.carbonProfiles), nil for none: what it
// rates energy by and forecasts flexible jobs' starts with.
func carbonSource(cfg config.Config, now func() time.Time) (carbon.Feed, error) {
	switch {
	case cfg.Energy.CarbonSDK != "":
		return carbon.NewSDK(carbon.SDKOptions{URL: cfg.Energy.CarbonSDK, Now: now})
	case cfg.Energy.CarbonProfiles != "":
		return carbon.LoadProfiles(cfg.Energy.CarbonProfiles)
	}
	return nil, nil
}

// adviceRun is what advice reads of a workload's run (package runs).
func (s *Server) adviceRun(ctx context.Context, id string) (advice.Run, error) {
	at, v, err := s.Runs.Advised(ctx, id)
	if err != nil || v == nil {
		return advice.Run{ProgressAt: at}, err
	}
	return advice.Run{ProgressAt: at, Stalled: &advice.Stalled{Rule: v.Rule, Reason: v.Reason, At: v.At}}, nil
}
