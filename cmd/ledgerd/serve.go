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
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
	"github.com/pointledger/pointledger/migrations"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs, getenv)
	fs.StringVar(&c.ListenAddr, "listen", envOr(getenv, "LEDGER_LISTEN_ADDR", ":8080"), "address to serve on (LEDGER_LISTEN_ADDR)")
	scale, err := intFromEnv(getenv, "LEDGER_AMOUNT_SCALE", ledger.DefaultScale)
	if err != nil {
		return err
	}
	fs.IntVar(&c.AmountScale, "amount-scale", scale, "digits allowed after the point in amounts (LEDGER_AMOUNT_SCALE)")
	shutdown, err := durationFromEnv(getenv, "LEDGER_SHUTDOWN_TIMEOUT", 15*time.Second)
	if err != nil {
		return err
	}
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", shutdown, "how long in-flight requests may finish after SIGTERM (LEDGER_SHUTDOWN_TIMEOUT)")
	maxBatch, err := intFromEnv(getenv, "LEDGER_MAX_BATCH", dynamo.DefaultMaxBatch)
	if err != nil {
		return err
	}
	fs.IntVar(&c.MaxBatch, "max-batch", maxBatch, "group commit: at most this many mutations of one user per transaction; 1 turns it off (LEDGER_MAX_BATCH)")
	linger, err := durationFromEnv(getenv, "LEDGER_BATCH_LINGER", 0)
	if err != nil {
		return err
	}
	fs.DurationVar(&c.BatchLinger, "batch-linger", linger, "group commit: wait this long for a group to fill; 0: a group is what queued meanwhile (LEDGER_BATCH_LINGER)")
	fs.BoolVar(&c.Projector, "projector", getenv("LEDGER_PROJECTOR") != "false",
		"run the history projector in this process; -projector=false when `ledgerd project` runs it (LEDGER_PROJECTOR)")
	if err := c.projectorFlags(fs, getenv); err != nil {
		return err
	}
	var ac authConfig
	if err := ac.flags(fs, getenv); err != nil {
		return err
	}
	opsAddr := opsFlag(fs, getenv, "127.0.0.1:9090")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := validScale(c.AmountScale); err != nil {
		return err
	}
	if c.MaxBatch < 1 || c.BatchLinger < 0 {
		return fmt.Errorf("-max-batch must be at least 1 and -batch-linger not negative")
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	c.metrics = metrics.New()
	authn, err := ac.authenticator(getenv)
	if err != nil {
		return err
	}
	if authn.Insecure() {
		warnInsecure(ctx, log, time.Minute)
	}
	// Every RPC is authenticated (and rate limited per caller) before its
	// body is read; the interceptor then checks the user id it acts for.
	limiter := auth.NewLimiter(ac.rateLimit, ac.rateBurst, nil)
	options := append(handlerOptions(c.metrics, log), connect.WithInterceptors(auth.Interceptor()))
	protect := func(h http.Handler) http.Handler { return auth.Middleware(authn, limiter, log, h, options...) }
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return err
	}
	var projector *projection.Projector
	if c.Projector {
		projector = c.projector(parts, log)
	}

	mux := http.NewServeMux()
	path, handler := pointledgerv1connect.NewLedgerServiceHandler(
		api.NewLedgerService(parts.store, parts.history, int32(c.AmountScale), log),
		options...,
	)
	mux.Handle(path, protect(handler))
	projectorStatus := func() (projection.Status, bool) {
		if projector == nil {
			return projection.Status{}, false
		}
		return projector.Status(), true
	}
	path, handler = pointledgerv1connect.NewAdminServiceHandler(
		api.NewAdminService(parts.store, parts.history, reconcile.New(parts.store, parts.history, c.leaseTable(parts)),
			projectorStatus, int32(c.AmountScale), log),
		options...,
	)
	mux.Handle(path, protect(handler))
	health := &cachedPing{store: parts.store, ttl: time.Second} // /healthz and grpc.health.v1 need no token
	healthHandlers(mux, health, log)
	// Nothing else on this port: whoever reaches it learns nothing about
	// the host or the process (404 even for another method on /healthz).
	mux.Handle("/", http.NotFoundHandler())

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: gRPC without TLS
	srv := &http.Server{
		Handler:           mux,
		Protocols:         &protocols,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", c.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close() // when the operations listener fails; Shutdown closes it otherwise
	stopOps, err := serveOps(*opsAddr, opsMux(c.metrics, health, projector, log), log)
	if err != nil {
		return err
	}
	defer stopOps()
	log.InfoContext(ctx, "ledgerd serving", "version", version, "addr", ln.Addr().String(),
		"dynamodb_endpoint", c.Endpoint, "table_prefix", c.TablePrefix, "amount_scale", c.AmountScale, "projector", c.Projector,
		"max_batch", c.MaxBatch, "batch_linger", c.BatchLinger, "insecure_dev", authn.Insecure(), "rate_limit", ac.rateLimit)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	projectorCtx, stopProjector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProjector()
	projectorDone := make(chan error, 1)
	if projector != nil {
		go func() { projectorDone <- runProjector(projectorCtx, projector, log, 30*time.Second) }()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case err := <-projectorDone:
		return fmt.Errorf("projector: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if projector != nil {
		// The requests are done; stop projecting and hand the leases over.
		stopProjector()
		if err := <-projectorDone; err != nil {
			log.Warn("projector stopped with an error", "error", err)
		}
	}
	log.Info("stopped")
	return nil
}

func project(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("project", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs, getenv)
	if err := c.projectorFlags(fs, getenv); err != nil {
		return err
	}
	rebuild := fs.Bool("rebuild", false, "rebuild history from the ledger itself and exit, instead of following the stream")
	user := fs.String("user", "", "with -rebuild: only this user")
	opsAddr := opsFlag(fs, getenv, "127.0.0.1:9091")
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
	stopOps, err := serveOps(*opsAddr, opsMux(c.metrics, nil, projector, log), log)
	if err != nil {
		return err
	}
	defer stopOps()
	log.Info("projecting", "version", version, "owner", projector.Owner(), "table_prefix", c.TablePrefix)
	return runProjector(ctx, projector, log, 30*time.Second)
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs, getenv)
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

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}
