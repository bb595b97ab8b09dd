package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/allowance"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/console"
	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchdynamo "github.com/pointledger/pointledger/internal/dispatch/dynamo"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
	"github.com/pointledger/pointledger/internal/sweep"
	"github.com/pointledger/pointledger/migrations"
)

// serve serves the API, and the operations listener, until ctx ends.
func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := serveFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	setGCPercent(getenv)
	fitProcs(ctx, c.fitProcs, getenv, log)
	authn, err := c.auth.authenticator(getenv)
	if err != nil {
		return err
	}
	if c.pageTokenKey, err = servedPageTokenKey(authn, getenv); err != nil {
		return err
	}
	// Both ports before anything else: a busy one stops serve before it
	// talks to DynamoDB or starts the projector.
	ports, err := bind(c.ListenAddr, c.opsAddr)
	if err != nil {
		return err
	}
	defer ports.close() // when serve stops before it serves; the servers close them otherwise
	if authn.Insecure() {
		warnInsecure(ctx, log, time.Minute)
	}
	// Every procedure's series start at 0, before its first call.
	c.metrics = servedMetrics()
	peers, err := c.affinity.newPeers(ctx, authn, getenv, c.metrics, log)
	if err != nil {
		return err
	}
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return err
	}
	c.metrics.WatchBudgets(func(ctx context.Context, limit int) ([]ledger.Budget, error) {
		budgets, _, err := parts.store.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: limit}})
		return budgets, err
	})
	// The dispatcher's deliveries serve the API whether or not it delivers
	// in this process (ListWebhookDeliveries, RedeliverWebhookEvents).
	shared := c.sharedReader && c.Projector && c.dispatcher
	dl, err := c.newDelivery(parts, c.delivery, c.dispatcher && !shared, log)
	if err != nil {
		return err
	}
	var projector *projection.Projector
	switch {
	case shared:
		projector = c.sharedProjector(parts, dl, log)
	case c.Projector:
		projector = c.projector(parts, log)
	}
	var delivering *delivery
	if c.dispatcher {
		delivering = dl
	}
	var sweeper *sweep.Sweeper
	if c.sweeper {
		sweeper = c.newSweeper(parts, c.sweep, log)
	}
	health := &cachedPing{store: parts.store, ttl: time.Second} // /healthz and grpc.health.v1 need no token
	support, err := c.auth.supportLimits(allowance.New(parts.db, c.TablePrefix+migrations.LeaseTable))
	if err != nil {
		return err
	}
	handler, err := c.apiHandler(parts, projector, dl.dispatcher, health, authn, support, peers, log)
	if err != nil {
		return err
	}
	srv := apiServer(handler, log)
	var running *dispatch.Dispatcher
	if delivering != nil {
		running = delivering.dispatcher
	}
	stopOps := serveOps(ports.ops, opsMux(c.metrics, health, projector, running, log), log)
	defer stopOps()
	log.InfoContext(ctx, "ledgerd serving", "version", version, "addr", ports.api.Addr().String(),
		"dynamodb_endpoint", c.Endpoint, "table_prefix", c.TablePrefix, "amount_scale", c.AmountScale, "projector", c.Projector,
		"dispatcher", c.dispatcher, "shared_stream_reader", shared, "notice_leads", c.delivery.noticeLeads,
		"max_batch", c.MaxBatch, "batch_linger", c.BatchLinger, "insecure_dev", authn.Insecure(), "rate_limit", c.auth.rateLimit,
		"history_wait", c.historyWait, "cors_origins", c.corsOrigins, "webhook_allow_http", c.delivery.policy.AllowHTTP,
		"webhook_allow_loopback", c.delivery.policy.AllowLoopback, "webhook_allow_private", c.delivery.policy.AllowPrivate,

		"console", c.console, "peers", c.affinity.peers, "self", c.affinity.self, "forward_timeout", c.affinity.timeout)
	if peers != nil {
		c.metrics.WatchPeers(peers.Count)
		// Until its first round of checks, this instance owns every user.
		go peers.Run(ctx)
	}
	return c.serveUntilDone(ctx, srv, ports.api, projector, sweeper, delivering, log)
}

// defaultGCPercent is serve's GOGC when the environment sets none. Go's
// default, 100, collects each time the heap has grown by its live size;
// serve's live heap is small (a few MB under uniform) and its garbage comes fast
// (about 53 KB a purchase, BenchmarkPurchasePath), so at 100 the collector
// ran several times a second under load and took about a tenth of
// serve's CPU (issue 37). At 400 it runs a quarter as often, for a heap
// that may reach five times the live one; GOMEMLIMIT still bounds it.
const defaultGCPercent = 400

// setGCPercent sets the collector to defaultGCPercent, unless GOGC says
// otherwise (the runtime has read it already).
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// servedMetrics is serve's registry, every procedure's series at 0 before
// its first call.
func servedMetrics() *metrics.Metrics {
	return metrics.New(slices.Concat(api.Procedures(api.LedgerServiceDescriptor()), api.Procedures(api.AdminServiceDescriptor()),
		api.Procedures(api.WebhookServiceDescriptor()), api.Procedures(api.BudgetServiceDescriptor()), api.Procedures(api.PointKindServiceDescriptor()))...)
}

// serveConfig is what serve is told: the options every command shares, and
// its own (who may call, where operators reach it).
type serveConfig struct {
	Config
	auth        authConfig
	affinity    affinityConfig
	corsOrigins []string // browser origins whose scripts may call; none: no CORS
	opsAddr     string
	expiry      api.ExpiryPolicy
	// historyWait: how long ListHistory waits for the history to reach a
	// min_version.
	historyWait time.Duration
	sweeper     bool
	sweep       time.Duration // between the sweeper's passes
	fitProcs    bool          // fit GOMAXPROCS to the CPU used (package procs)
	// delivery: which endpoint URLs WebhookService accepts (its Resolver
	// is the system's) and the dispatcher delivers to, and how.
	delivery     deliveryConfig
	dispatcher   bool // run the dispatcher in this process
	sharedReader bool // the projector's reading of the stream feeds the dispatcher
	// console: serve the web console under /console/ on the API's port;
	// a sign-in lasts consoleSessionTTL.
	console           bool
	consoleSessionTTL time.Duration
}

// serveFlags reads serve's flags and their LEDGER_* variables, and checks
// them.
func serveFlags(args []string, getenv func(string) string, stderr io.Writer) (*serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := newSettings(fs, getenv)
	s.String(&c.ListenAddr, "listen", "LEDGER_LISTEN_ADDR", ":8080", "address to serve on")
	s.Int(&c.AmountScale, "amount-scale", "LEDGER_AMOUNT_SCALE", ledger.DefaultScale, "digits allowed after the point in amounts")
	s.Duration(&c.ShutdownTimeout, "shutdown-timeout", "LEDGER_SHUTDOWN_TIMEOUT", 15*time.Second, "how long in-flight requests may finish after SIGTERM")
	s.Int(&c.MaxBatch, "max-batch", "LEDGER_MAX_BATCH", dynamo.DefaultMaxBatch,
		"group commit: at most this many mutations of one user per transaction; 1 turns it off")
	s.Duration(&c.BatchLinger, "batch-linger", "LEDGER_BATCH_LINGER", 0,
		"group commit: wait this long for a group to fill; 0: a group is what queued meanwhile")
	s.Duration(&c.expiry.DefaultTTL, "grant-default-ttl", "LEDGER_GRANT_DEFAULT_TTL", 0,
		"how long points of a grant that names no expire_time or ttl live, e.g. 8760h; 0: they never expire")
	s.Duration(&c.expiry.Max, "max-expiry", "LEDGER_MAX_EXPIRY", api.DefaultMaxExpiry,
		"how far ahead points may expire; a later expire_time or longer ttl is INVALID_EXPIRY")
	s.Duration(&c.expiry.HoldTTL, "hold-default-ttl", "LEDGER_HOLD_DEFAULT_TTL", api.DefaultHoldTTL,
		"how long a checkout hold that names no expire_time or ttl holds its points")
	s.Duration(&c.expiry.HoldMax, "hold-max-ttl", "LEDGER_HOLD_MAX_TTL", api.DefaultMaxHoldTTL, "how far ahead a hold may expire; later is INVALID_EXPIRY")
	s.Duration(&c.expiry.EffectiveMax, "max-effective-delay", "LEDGER_MAX_EFFECTIVE_DELAY", api.DefaultMaxEffectiveDelay,
		"how far ahead a grant's points may become spendable (effective_time, effective_delay); later is INVALID_EFFECTIVE_TIME")
	s.Duration(&c.historyWait, "history-wait", "LEDGER_HISTORY_WAIT", api.DefaultHistoryWait,
		"how long ListHistory waits for the history to reach a request's min_version before it answers UNAVAILABLE (HISTORY_BEHIND); 0: not at all")
	s.Switch(&c.sweeper, "sweeper", "LEDGER_SWEEPER",
		"run the expiry sweeper in this process, which puts idle users' expired points on the record; several share the work")
	s.Duration(&c.sweep, "sweep-interval", "LEDGER_SWEEP_INTERVAL", 15*time.Second, "time between the sweeper's passes")
	s.Switch(&c.Projector, "projector", "LEDGER_PROJECTOR",
		"run the history projector in this process; -projector=false when `ledgerd project` runs it")
	var corsOrigins string
	s.String(&corsOrigins, "cors-origins", "LEDGER_CORS_ORIGINS", "",
		"browser origins whose scripts may call the API, exact and comma-separated, e.g. https://shop.example,https://admin.shop.example; none: no CORS")
	s.Switch(&c.dispatcher, "dispatcher", "LEDGER_DISPATCHER",
		"run the webhook dispatcher in this process; -dispatcher=false when `ledgerd dispatch` runs it")
	s.Switch(&c.sharedReader, "shared-stream-reader", "LEDGER_SHARED_STREAM_READER",
		"with the projector and the dispatcher in this process: one reading of the stream feeds both (each batch to both at once); -shared-stream-reader=false: one reading each")
	s.Switch(&c.fitProcs, "fit-procs", "LEDGER_FIT_PROCS",
		"fit the Go scheduler's processors (GOMAXPROCS) to the CPU this process uses, from 1 to the CPUs it may use at start: at most doubled each 50 ms while the load needs them, taken away after a second of less (a process that waits on DynamoDB wastes CPU waking idle ones; docs/operations.md); not when GOMAXPROCS is set")
	s.Bool(&c.console, "console", "LEDGER_CONSOLE",
		"serve the web console for support and finance staff under /console/ on the API's port (admin and support tokens sign in); see docs/console.md")
	s.Duration(&c.consoleSessionTTL, "console-session-ttl", "LEDGER_CONSOLE_SESSION_TTL", console.DefaultSessionTTL,
		"how long a console sign-in lasts")
	c.delivery.flags(s)
	opsFlag(s, &c.opsAddr, "127.0.0.1:9090")
	// Every part's settings, so that the errors of all the variables come
	// at once.
	err := errors.Join(s.err(), c.flags(fs, getenv), c.projectorFlags(fs, getenv), c.auth.flags(fs, getenv), c.affinity.flags(fs, getenv))
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.corsOrigins, err = parseCORSOrigins(corsOrigins); err != nil {
		return nil, err
	}
	if err := c.delivery.check(); err != nil {
		return nil, err
	}
	if err := validScale(c.AmountScale); err != nil {
		return nil, err
	}
	if c.MaxBatch < 1 || c.BatchLinger < 0 {
		return nil, fmt.Errorf("-max-batch must be at least 1 and -batch-linger not negative")
	}
	if c.expiry.DefaultTTL < 0 || c.expiry.Max <= 0 || c.expiry.DefaultTTL > c.expiry.Max {
		return nil, fmt.Errorf("-grant-default-ttl must be 0 to -max-expiry, and -max-expiry positive")
	}
	if c.expiry.HoldTTL <= 0 || c.expiry.HoldMax <= 0 || c.expiry.HoldTTL > c.expiry.HoldMax {
		return nil, fmt.Errorf("-hold-default-ttl must be positive and at most -hold-max-ttl")
	}
	if c.expiry.EffectiveMax <= 0 {
		return nil, fmt.Errorf("-max-effective-delay (LEDGER_MAX_EFFECTIVE_DELAY) must be positive")
	}
	if c.consoleSessionTTL <= 0 {
		return nil, fmt.Errorf("-console-session-ttl (LEDGER_CONSOLE_SESSION_TTL) must be positive, not %v", c.consoleSessionTTL)
	}
	if c.historyWait < 0 || c.historyWait > api.MaxHistoryWait {
		return nil, fmt.Errorf("-history-wait (LEDGER_HISTORY_WAIT) must be 0 to %v, not %v", api.MaxHistoryWait, c.historyWait)
	}
	return &c, nil
}

// servedPageTokenKey is the key of the page tokens serve gives out when
// LEDGER_PAGE_TOKEN_KEY names none: derived from the credentials' signing
// key, a secret the deployment has already, so that a page token can be
// neither made nor altered by someone who knows only the table's name (as
// with a key derived from it). Without user token keys there is no such
// secret, and serve refuses to start rather than fall back to a key
// anyone can work out. nil: LEDGER_PAGE_TOKEN_KEY is set, or -insecure-dev.
func servedPageTokenKey(authn *auth.Authenticator, getenv func(string) string) ([]byte, error) {
	if getenv("LEDGER_PAGE_TOKEN_KEY") != "" || authn.Insecure() {
		return nil, nil
	}
	key, ok := authn.DeriveKey(pageTokenKeyPurpose)
	if !ok {
		return nil, errors.New("the credentials have no user_token_keys to derive the page token key from: " +
			"set LEDGER_PAGE_TOKEN_KEY to 64 hex digits, e.g. `openssl rand -hex 32` (see docs/operations.md, Page tokens)")
	}
	return key, nil
}

// ports are serve's two listeners, bound before anything starts.
type ports struct {
	api net.Listener
	ops net.Listener // nil: -ops-listen off
}

// bind takes the API's address and the operations listener's, and says
// which flag a busy or bad one came from.
func bind(apiAddr, opsAddr string) (*ports, error) {
	api, err := net.Listen("tcp", apiAddr)
	if err != nil {
		return nil, fmt.Errorf("API listener (-listen, LEDGER_LISTEN_ADDR): %w", err)
	}
	ops, err := listenOps(opsAddr)
	if err != nil {
		api.Close()
		return nil, err
	}
	return &ports{api: api, ops: ops}, nil
}

func (p *ports) close() {
	p.api.Close()
	if p.ops != nil {
		p.ops.Close()
	}
}

// apiHandler is what the API's port serves: the ledger, admin and webhook services,
// the health checks (and the peers', with peers), and nothing else.
func (c *serveConfig) apiHandler(parts *ledgerParts, projector *projection.Projector, deliveries *dispatch.Dispatcher, health pinger, authn *auth.Authenticator,
	support auth.SupportLimits, peers *affinity.Peers, log *slog.Logger,
) (http.Handler, error) {
	// Every RPC is authenticated (and rate limited per caller) before its
	// body is read; the interceptor then checks the user id it acts for,
	// and only then may a mutation be forwarded to its user's owner. A
	// path that names no procedure is answered unimplemented before that.
	limiter := auth.NewLimiter(c.auth.rateLimit, c.auth.rateBurst, nil)
	options := append(handlerOptions(c.metrics, log), connect.WithInterceptors(auth.NewInterceptor(support)))
	mux := http.NewServeMux()
	if peers != nil {
		options = append(options, connect.WithInterceptors(peers.Forwarder()))
		mux.Handle("GET "+affinity.HealthPath, peers.Handler(authn.PeerOnly, health.Ping))
	}
	protect := func(h http.Handler) http.Handler { return auth.Middleware(authn, limiter, log, h, options...) }
	// Browsers of the allowed origins get their preflights answered before
	// any of that, and can read every answer of the services, refusals
	// included; the health checks are for probes, not browsers.
	allowCORS := corsHandler(c.corsOrigins)

	service := api.NewLedgerService(parts.store, parts.history, int32(c.AmountScale), log)
	service.SetKinds(parts.store)
	service.SetExpiryPolicy(c.expiry)
	service.SetHistoryWait(c.historyWait)
	path, handler := pointledgerv1connect.NewLedgerServiceHandler(service, options...)
	mux.Handle(path, allowCORS(api.KnownProcedures(api.LedgerServiceDescriptor(), protect(handler), options...)))
	projectorStatus := func() (history.ProjectorStatus, bool) {
		if projector == nil {
			return history.ProjectorStatus{}, false
		}
		return projector.Status(), true
	}
	admin := api.NewAdminService(parts.store, parts.history, reconcile.New(parts.store, parts.history, c.leaseTable(parts)),
		projectorStatus, int32(c.AmountScale), log)
	admin.SetExpiryPolicy(c.expiry)
	path, handler = pointledgerv1connect.NewAdminServiceHandler(admin, options...)
	mux.Handle(path, allowCORS(api.KnownProcedures(api.AdminServiceDescriptor(), protect(handler), options...)))
	webhooks := api.NewWebhookService(dispatchdynamo.NewEndpoints(parts.db, c.TablePrefix+migrations.WebhookTable, nil), deliveries,
		api.WebhookOptions{URLPolicy: c.delivery.policy, EndpointRefresh: api.DefaultEndpointRefresh, PageTokens: parts.tokens}, log)
	path, handler = pointledgerv1connect.NewWebhookServiceHandler(webhooks, options...)
	mux.Handle(path, allowCORS(api.KnownProcedures(api.WebhookServiceDescriptor(), protect(handler), options...)))
	path, handler = pointledgerv1connect.NewBudgetServiceHandler(api.NewBudgetService(parts.store, int32(c.AmountScale), log), options...)
	mux.Handle(path, allowCORS(api.KnownProcedures(api.BudgetServiceDescriptor(), protect(handler), options...)))
	path, handler = pointledgerv1connect.NewPointKindServiceHandler(api.NewPointKindService(parts.store, log), options...)
	mux.Handle(path, allowCORS(api.KnownProcedures(api.PointKindServiceDescriptor(), protect(handler), options...)))
	healthHandlers(mux, health, log)
	if c.console {
		// The console calls the API's handlers in-process, through the
		// same authentication and rules as any client.
		key, _ := authn.DeriveKey(consoleKeyPurpose) // none under -insecure-dev: a key of this process
		cons, err := console.New(console.Options{API: mux, Auth: authn, Key: key, SessionTTL: c.consoleSessionTTL, Log: log})
		if err != nil {
			return nil, err
		}
		mux.Handle(console.Prefix, cons)
	}
	// Nothing else on this port: whoever reaches it learns nothing about
	// the host or the process (404 even for another method on /healthz),
	// and an RPC that names no service is told it does not exist.
	mux.Handle("/", api.NoService(options...))
	return mux, nil
}

// consoleKeyPurpose derives the key that seals the console's session
// cookies from the credentials' signing key: every instance has it, so a
// session is good on each of them, and rotating the key signs everyone out.
const consoleKeyPurpose = "pointledger console session v1"

// apiServer serves h on the API's port: HTTP/1.1 and h2c (gRPC without
// TLS), with every phase of a request bounded.
func apiServer(h http.Handler, log *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: gRPC without TLS
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveUntilDone serves srv on ln, and runs projector, dl and sweeper
// (nil: none) as workers, until ctx ends or either fails. Then it shuts
// down in order: the requests in flight finish (within -shutdown-timeout),
// then the sweeper stops, then the delivery, then the projector, which
// hands its leases over.
func (c *serveConfig) serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, projector *projection.Projector, sweeper *sweep.Sweeper,
	dl *delivery, log *slog.Logger,
) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// Stopped in the reverse order: the sweeper, then the delivery
	// (attempts under way finish; their queues are released, due now),
	// then the projector, which hands its leases over.
	w := newWorkers(log)
	defer w.cancel()
	if projector != nil {
		w.start(ctx, "projector", func(ctx context.Context) error { return runProjector(ctx, projector, log, 30*time.Second) })
	}
	if dl != nil {
		w.start(ctx, "webhook delivery", dl.run)
	}
	if sweeper != nil {
		w.start(ctx, "sweeper", sweeper.Run)
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err := <-w.failed():
		return err
	case <-ctx.Done():
	}

	log.Info("shutting down", "timeout", c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// The requests are done: stop the workers.
	w.stop()
	log.Info("stopped")
	return nil
}

func project(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("project", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rebuild := fs.Bool("rebuild", false, "rebuild history from the ledger itself and exit, instead of following the stream")
	user := fs.String("user", "", "with -rebuild: only this user")
	s := newSettings(fs, getenv)
	var opsAddr string
	opsFlag(s, &opsAddr, "127.0.0.1:9091")
	if err := errors.Join(s.err(), c.flags(fs, getenv), c.projectorFlags(fs, getenv)); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user != "" && !*rebuild {
		return errors.New("-user goes with -rebuild")
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	if !*rebuild {
		c.metrics = metrics.New()
	}
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return err
	}
	if *rebuild {
		start := time.Now()
		if *user != "" {
			if err := ledger.ValidateUserID(*user); err != nil {
				return err
			}
			if err := parts.history.Rebuild(ctx, *user); err != nil {
				return err
			}
			log.Info("history rebuilt from the ledger", "user_id", *user, "duration", time.Since(start))
			return nil
		}
		n, err := parts.history.RebuildAll(ctx)
		if err != nil {
			return err
		}
		log.Info("history rebuilt from the ledger", "users", n, "duration", time.Since(start))
		return nil
	}
	projector := c.projector(parts, log)
	opsLn, err := listenOps(opsAddr)
	if err != nil {
		return err
	}
	stopOps := serveOps(opsLn, opsMux(c.metrics, nil, projector, nil, log), log)
	defer stopOps()
	log.Info("projecting", "version", version, "owner", projector.Owner(), "table_prefix", c.TablePrefix)
	return runProjector(ctx, projector, log, 30*time.Second)
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := c.flags(fs, getenv); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	db, _, err := c.clients(ctx, getenv)
	if err != nil {
		return err
	}
	return migrations.Apply(ctx, db, c.TablePrefix, log)
}
