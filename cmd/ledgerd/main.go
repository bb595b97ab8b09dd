// Command ledgerd runs pointledger: `ledgerd serve` serves the API (and runs
// the history projector), `ledgerd migrate` creates the tables, `ledgerd
// project` runs the projector alone or rebuilds history, `ledgerd import`
// sends a file of credits through the API, `ledgerd version` prints the
// version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ownProcess = true
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // the usage was asked for, and printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerd:", err)
		var exit *exitError
		if errors.As(err, &exit) {
			os.Exit(exit.code)
		}
		os.Exit(1)
	}
}

const usage = `usage: ledgerd <command> [flags]

commands:
  serve     serve the Connect API (Connect/HTTP JSON, gRPC, gRPC-Web) on one port
  migrate   create the DynamoDB tables (idempotent)
  project   run the history projector alone (several may share the stream),
            or rebuild history from the ledger with -rebuild [-user U]
  dispatch  run the webhook dispatcher alone (serve runs one too unless
            -dispatcher=false); several share the stream and the queues
  reconcile prove that balances, entries and history agree; exit 0 when
            clean, 1 on findings, 2 when it could not finish
  expire    run the expiry sweeper alone (serve runs one too), or one pass
            with -once
  import    send a file of credits (CSV or JSON Lines, one Grant a line)
            through the API; a rerun replays what is done; exit 0 when
            nothing was refused, 1 when some lines were, 2 when it could
            not finish
  token     mint a user token (-user U), or make a new service/admin/peer
            token or signing key (-new service|admin|peer|key)
  version   print the version

Run 'ledgerd <command> -h' for the flags; every flag can also be set by its
LEDGER_* environment variable.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest, getenv, stderr)
	case "migrate":
		return migrate(ctx, rest, getenv, stderr)
	case "project":
		return project(ctx, rest, getenv, stderr)
	case "dispatch":
		return dispatchCmd(ctx, rest, getenv, stderr)
	case "reconcile":
		return reconcileCmd(ctx, rest, getenv, stdout, stderr)
	case "expire":
		return expireCmd(ctx, rest, getenv, stdout, stderr)
	case "import":
		return importCmd(ctx, rest, getenv, stdout, stderr)
	case "token":
		return token(rest, getenv, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "ledgerd", version)
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
