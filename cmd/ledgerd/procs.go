package main

import (
	"context"
	"log/slog"

	"github.com/pointledger/pointledger/internal/procs"
)

// ownProcess is true when ledgerd runs as its own program (main sets it):
// serve fits the process's GOMAXPROCS only then, never in a test binary
// that runs serve beside other tests.
var ownProcess bool

// fitProcs starts fitting GOMAXPROCS to the CPU serve uses (package
// procs), unless -fit-procs=false, GOMAXPROCS is set (the operator chose)
// or serve runs in another program's process. The fitting ends with ctx,
// which gives the runtime its default GOMAXPROCS back. It returns a channel
// closed when the fitting has ended, nil when it does not fit.
func fitProcs(ctx context.Context, on bool, getenv func(string) string, log *slog.Logger) <-chan struct{} {
	if !on || !ownProcess || getenv("GOMAXPROCS") != "" {
		return nil
	}
	f := procs.New(procs.Options{Changed: func(from, to int, used float64) {
		log.Debug("GOMAXPROCS fitted", "from", from, "to", to, "cpus_used", used)
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	return done
}
