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

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := validScale(c.AmountScale); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	db, err := c.dynamoClient(ctx, getenv)
	if err != nil {
		return err
	}
	store := dynamo.New(db, dynamo.Options{Table: c.ledgerTable(), Logger: log})

	mux := http.NewServeMux()
	path, handler := pointledgerv1connect.NewLedgerServiceHandler(
		api.NewLedgerService(store, int32(c.AmountScale), log),
		api.HandlerOptions(log)...,
	)
	mux.Handle(path, handler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := store.Ping(ctx); err != nil {
			log.WarnContext(ctx, "health check failed", "error", err)
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})

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
	log.InfoContext(ctx, "ledgerd serving", "version", version, "addr", ln.Addr().String(),
		"dynamodb_endpoint", c.Endpoint, "ledger_table", c.ledgerTable(), "amount_scale", c.AmountScale)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
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
	log.Info("stopped")
	return nil
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
	db, err := c.dynamoClient(ctx, getenv)
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
