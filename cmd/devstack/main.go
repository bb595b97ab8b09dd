// Command devstack runs pointledger on this machine for development, as
// `make run` does: it starts DynamoDB Local (fetched by `make dynamodb-local`),
// applies the migrations with `ledgerd migrate`, then runs `ledgerd serve`
// until interrupted, and stops the emulator on the way out.
//
// Settings: DYNAMODB_PORT (default: a free port), DYNAMODB_DB_PATH (default:
// in memory; a folder keeps the data across runs), and every LEDGER_*
// variable of ledgerd (LEDGER_LISTEN_ADDR defaults to :8080, and
// LEDGER_OPS_LISTEN, the operations listener with the metrics, the profiler
// and the projection's status, to 127.0.0.1:9090). Without
// LEDGER_AUTH_FILE or LEDGER_AUTH_JSON it makes local dev credentials in
// .local/dev-credentials/ on the first run and serves with them.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	ledgerd := flag.String("ledgerd", "bin/ledgerd", "the ledgerd binary")
	credsDir := flag.String("credentials", ".local/dev-credentials", "folder of the local dev credentials, made on first run")
	flag.Parse()

	port := 0
	if p := os.Getenv("DYNAMODB_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("DYNAMODB_PORT=%q: want a port number", p)
		}
		port = n
	}
	dbPath := os.Getenv("DYNAMODB_DB_PATH")
	if dbPath != "" {
		if err := os.MkdirAll(dbPath, 0o755); err != nil {
			return err
		}
	}
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{Port: port, DBPath: dbPath})
	if err != nil {
		return err
	}
	defer emu.Stop()
	where := "in memory"
	if dbPath != "" {
		where = "in " + dbPath
	}
	fmt.Fprintf(os.Stderr, "devstack: DynamoDB Local on %s (%s)\n", emu.Endpoint, where)

	env := append(os.Environ(), "LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint)
	if os.Getenv("LEDGER_AUTH_FILE") == "" && os.Getenv("LEDGER_AUTH_JSON") == "" {
		file, err := devCredentials(*credsDir, os.Getenv("LEDGER_LISTEN_ADDR"))
		if err != nil {
			return err
		}
		env = append(env, "LEDGER_AUTH_FILE="+file)
	}
	if os.Getenv("LEDGER_LOG_FORMAT") == "" {
		env = append(env, "LEDGER_LOG_FORMAT=text")
	}
	migrate := exec.CommandContext(ctx, *ledgerd, "migrate")
	migrate.Env, migrate.Stdout, migrate.Stderr = env, os.Stderr, os.Stderr
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("ledgerd migrate: %w", err)
	}

	if ops := cmp.Or(os.Getenv("LEDGER_OPS_LISTEN"), "127.0.0.1:9090"); ops != "off" { // ledgerd's default
		fmt.Fprintf(os.Stderr, "devstack: metrics, profiler and projection status on the operations listener: curl -s %s/projection/status\n", ops)
	}
	serve := exec.Command(*ledgerd, "serve")
	serve.Env, serve.Stdout, serve.Stderr = env, os.Stdout, os.Stderr
	if err := serve.Start(); err != nil {
		return fmt.Errorf("ledgerd serve: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		return fmt.Errorf("ledgerd serve exited: %w", err)
	case <-ctx.Done():
	}
	// Let ledgerd finish its requests (it shuts down gracefully on SIGTERM).
	_ = serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return err
		}
	case <-time.After(20 * time.Second):
		_ = serve.Process.Kill()
	}
	fmt.Fprintln(os.Stderr, "devstack: stopped ledgerd and DynamoDB Local")
	return nil
}

// devCredentials makes local credentials in dir on the first run (and keeps
// them after), and says how to call with them.
func devCredentials(dir, listen string) (string, error) {
	_, err := auth.ReadDevDir(dir) // it checks them; the files are what the commands below read
	if errors.Is(err, fs.ErrNotExist) {
		d := auth.GenerateDev()
		if _, err = d.WriteDir(dir); err == nil {
			fmt.Fprintf(os.Stderr, "devstack: made local dev credentials in %s/ (keep them out of git; /.local/ is ignored)\n", dir)
		}
	}
	if err != nil {
		return "", fmt.Errorf("dev credentials in %s: %w", dir, err)
	}
	host := "localhost:8080"
	if listen != "" && !strings.HasPrefix(listen, ":") {
		host = listen
	} else if listen != "" {
		host = "localhost" + listen
	}
	fmt.Fprintf(os.Stderr, `devstack: every call needs a token; as a trusted service:
  export TOKEN=$(cat %[1]s/%[2]s)
  curl -s %[5]s/pointledger.v1.LedgerService/GetBalance -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d '{"user_id":"alice"}'
admin token: %[1]s/%[3]s; a user token for alice (1 h):
  bin/ledgerd token -auth-file %[1]s/%[4]s -user alice
`, dir, auth.DevServiceTokenFile, auth.DevAdminTokenFile, auth.DevCredentialsFile, host)
	return filepath.Join(dir, auth.DevCredentialsFile), nil
}
