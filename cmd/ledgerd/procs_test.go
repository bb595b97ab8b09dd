package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"
)

// TestFitProcsOnlyWhereServeOwnsTheProcess: serve fits GOMAXPROCS in
// ledgerd's own process with -fit-procs on and GOMAXPROCS unset, and in no
// other case (a test binary running serve, the operator's GOMAXPROCS,
// -fit-procs=false); the fitting it starts gives the processors back when
// serve's context ends.
func TestFitProcsOnlyWhereServeOwnsTheProcess(t *testing.T) {
	before, was := runtime.GOMAXPROCS(0), ownProcess
	t.Cleanup(func() { ownProcess = was; runtime.GOMAXPROCS(before) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name   string
		own    bool
		on     bool
		procs  string // GOMAXPROCS in the environment
		starts bool
	}{
		{name: "in a test's process", own: false, on: true},
		{name: "GOMAXPROCS set", own: true, on: true, procs: "2"},
		{name: "-fit-procs=false", own: true, on: false},
		{name: "ledgerd's own process", own: true, on: true, starts: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ownProcess = c.own
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := fitProcs(ctx, c.on, env(c.procs), log)
			if (done != nil) != c.starts {
				t.Fatalf("fitting started: %v, want %v", done != nil, c.starts)
			}
			if done == nil {
				return
			}
			cancel()
			<-done
			// The runtime's default ignores a GOMAXPROCS in the environment.
			if got := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && got != before {
				t.Fatalf("GOMAXPROCS %d after serve's context ended, want the default %d back", got, before)
			}
		})
	}
}

// TestServeFlagsFitProcsByDefault: -fit-procs is on unless turned off by
// the flag or LEDGER_FIT_PROCS.
func TestServeFlagsFitProcsByDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{name: "default", want: true},
		{name: "flag off", args: []string{"-fit-procs=false"}, want: false},
		{name: "variable off", env: "false", want: false},
		{name: "flag wins", args: []string{"-fit-procs=true"}, env: "false", want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "LEDGER_FIT_PROCS" {
					return c.env
				}
				return ""
			}
			sc, err := serveFlags(c.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if sc.fitProcs != c.want {
				t.Fatalf("fitProcs %v, want %v", sc.fitProcs, c.want)
			}
		})
	}
}
