// Command devstack runs pointledger on this machine for development, as
// `make run` does: it starts DynamoDB Local (fetched by `make dynamodb-local`),
// applies the migrations with `ledgerd migrate`, then runs `ledgerd serve`
// until interrupted, and stops both on the way out (Ctrl-C exits 0).
//
// While it runs, .local/dev.env says where everything is, as shell exports
// for the commands beside it (`. .local/dev.env && bin/ledgerd reconcile`,
// `make reconcile`): the emulator's endpoint, the credentials file, a
// service and an admin token, the API's and the operations listener's URLs.
//
// Settings: DYNAMODB_PORT (default 8000, DynamoDB Local's own, or a free
// port when 8000 is taken), DYNAMODB_DB_PATH (default: in memory; a folder,
// relative to the working directory, keeps the data across runs), and every
// LEDGER_* variable of ledgerd (LEDGER_LISTEN_ADDR defaults to :8080 and
// LEDGER_OPS_LISTEN, the operations listener with the metrics, the profiler
// and the projection's status, to 127.0.0.1:9090; LEDGER_WEBHOOK_ALLOW_HTTP
// and LEDGER_WEBHOOK_ALLOW_LOOPBACK to true, so that webhook endpoints may be
// on this machine). Without LEDGER_AUTH_FILE
// or LEDGER_AUTH_JSON it makes local dev credentials in
// .local/dev-credentials/ on the first run and serves with them.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
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
	// Ctrl-C is for devstack alone: it stops ledgerd, then the emulator, in
	// that order, and make sees a clean exit (see terminal.go).
	restore := foregroundTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// Defaults, as ledgerd and DynamoDB Local have them.
const (
	defaultListen   = ":8080"
	defaultOps      = "127.0.0.1:9090"
	defaultDynamoDB = 8000
)

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fset.SetOutput(stderr)
	ledgerd := fset.String("ledgerd", "bin/ledgerd", "the ledgerd binary")
	state := fset.String("state", ".local", "folder of the local state: dev.env and, made on first run, dev-credentials/")
	if err := fset.Parse(args); err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "devstack: "+format+"\n", a...) }

	// A busy port is reported before anything starts.
	listen := cmp.Or(getenv("LEDGER_LISTEN_ADDR"), defaultListen)
	ops := cmp.Or(getenv("LEDGER_OPS_LISTEN"), defaultOps)
	if err := free(listen, "LEDGER_LISTEN_ADDR"); err != nil {
		return err
	}
	if ops != "off" {
		if err := free(ops, "LEDGER_OPS_LISTEN"); err != nil {
			return err
		}
	}
	port, err := dynamoDBPort(getenv, logf)
	if err != nil {
		return err
	}
	dbPath := getenv("DYNAMODB_DB_PATH")
	if dbPath != "" {
		// The emulator runs in its own folder and would resolve a relative
		// path from there.
		if dbPath, err = filepath.Abs(dbPath); err != nil {
			return err
		}
		if err := os.MkdirAll(dbPath, 0o755); err != nil {
			return err
		}
	}

	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{Port: port, DBPath: dbPath})
	if err != nil {
		return err
	}
	defer emu.Shutdown() // SIGTERM: with -dbPath it closes its database
	where := "in memory"
	if dbPath != "" {
		where = "in " + dbPath
	}
	logf("DynamoDB Local on %s (%s)", emu.Endpoint, where)

	env := append(os.Environ(), "LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint)
	authFile := getenv("LEDGER_AUTH_FILE")
	var dev *auth.DevCredentials
	devDir := filepath.Join(*state, "dev-credentials")
	devFile, err := filepath.Abs(filepath.Join(devDir, auth.DevCredentialsFile))
	if err != nil {
		return err
	}
	// The dev credentials, unless others are given (a shell that loaded
	// dev.env gives the dev ones back).
	if (authFile == "" && getenv("LEDGER_AUTH_JSON") == "") || authFile == devFile {
		d, err := devCredentials(devDir, logf)
		if err != nil {
			return err
		}
		dev, authFile = &d, devFile
		env = append(env, "LEDGER_AUTH_FILE="+devFile)
	}
	if getenv("LEDGER_LOG_FORMAT") == "" {
		env = append(env, "LEDGER_LOG_FORMAT=text")
	}
	// Webhook endpoints on this machine over plain http, so that the
	// quick start can deliver to a receiver it runs; private and
	// link-local addresses stay refused.
	// The console, for whoever answers members on this machine.
	for _, v := range []string{"LEDGER_WEBHOOK_ALLOW_HTTP", "LEDGER_WEBHOOK_ALLOW_LOOPBACK", "LEDGER_CONSOLE"} {
		if getenv(v) == "" {
			env = append(env, v+"=true")
		}
	}
	if err := ledgerdRun(ctx, *ledgerd, env, stderr, "migrate"); err != nil {
		return err
	}

	envFile := filepath.Join(*state, "dev.env")
	if err := writeDevEnv(envFile, devEnv{endpoint: emu.Endpoint, authFile: authFile, dev: dev, listen: listen, ops: ops}); err != nil {
		return err
	}
	defer os.Remove(envFile) // it describes this run only
	logf("the endpoint, tokens and URLs of this run are in %s: . %[1]s", envFile)
	if getenv("LEDGER_CONSOLE") != "false" {
		logf("the console: http://%s/console/ (sign in with $ADMIN_TOKEN or $SUPPORT_TOKEN of %s)", localHost(listen), envFile)
	}
	return serve(ctx, *ledgerd, env, stdout, stderr, logf)
}

// serve runs ledgerd serve until ctx ends, then stops it gracefully.
func serve(ctx context.Context, ledgerd string, env []string, stdout, stderr io.Writer, logf func(string, ...any)) error {
	cmd := exec.Command(ledgerd, "serve")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches devstack, which stops it in turn
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ledgerd serve: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return fmt.Errorf("ledgerd serve exited: %w", err)
	case <-ctx.Done():
	}
	// Let ledgerd finish its requests while DynamoDB is still there.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("ledgerd serve stopped: %w", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		logf("ledgerd did not stop within 20 s of SIGTERM: killed")
	}
	logf("stopped ledgerd and DynamoDB Local")
	return nil
}

// ledgerdRun runs one ledgerd command to its end.
func ledgerdRun(ctx context.Context, ledgerd string, env []string, stderr io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, ledgerd, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ledgerd %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// free says whether addr can be listened on, naming the setting if not.
func free(addr, setting string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s=%s is not free (another `make run`?); set %s to another address: %w", setting, addr, setting, err)
	}
	return ln.Close()
}

// dynamoDBPort is DYNAMODB_PORT, else DynamoDB Local's conventional 8000,
// else (8000 taken) 0, a free port.
func dynamoDBPort(getenv func(string) string, logf func(string, ...any)) (int, error) {
	if p := getenv("DYNAMODB_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return 0, fmt.Errorf("DYNAMODB_PORT=%q: want a port number", p)
		}
		return n, free(":"+p, "DYNAMODB_PORT")
	}
	// The emulator listens on every interface, so that is what must be free.
	if free(":"+strconv.Itoa(defaultDynamoDB), "") == nil {
		return defaultDynamoDB, nil
	}
	logf("port %d is taken: DynamoDB Local gets a free port (see .local/dev.env)", defaultDynamoDB)
	return 0, nil
}

// devCredentials makes local credentials in dir on the first run (and keeps
// them after).
func devCredentials(dir string, logf func(string, ...any)) (auth.DevCredentials, error) {
	d, err := auth.ReadDevDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d = auth.GenerateDev()
		if _, err = d.WriteDir(dir); err == nil {
			logf("made local dev credentials in %s/ (keep them out of git; /.local/ is ignored)", dir)
		}
	case err == nil && (d.PeerToken == "" || d.SupportToken == ""): // made before there were peers, or support
		if d.PeerToken == "" {
			d.AddPeer()
		}
		if d.SupportToken == "" {
			d.AddSupport()
		}
		if _, err = d.WriteDir(dir); err == nil {
			logf("added the missing peer or support token to the local dev credentials in %s/", dir)
		}
	}
	if err != nil {
		return d, fmt.Errorf("dev credentials in %s: %w", dir, err)
	}
	return d, nil
}
