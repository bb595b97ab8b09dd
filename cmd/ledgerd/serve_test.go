package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dialCounter stands for DynamoDB: it counts the connections made to it,
// and answers none.
func dialCounter(tb testing.TB) (addr string, dials *atomic.Int64) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	dials = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), dials
}

// A busy API address stops serve before it starts anything: it says which
// flag and which address, and neither asks DynamoDB nor starts the
// projector (which would ask DynamoDB for the stream at once).
func TestServeStopsWhenTheAPIAddressIsBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dynamodb, dials := dialCounter(t)
	// Should serve start all the same, it stops at the deadline and the
	// test fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	err = run(ctx, []string{"serve", "-insecure-dev", "-listen", busy.Addr().String(), "-ops-listen", "127.0.0.1:0",
		"-dynamodb-endpoint", "http://" + dynamodb}, func(string) string { return "" }, &out, &errOut)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) ||
		!strings.Contains(err.Error(), "-listen") || !strings.Contains(err.Error(), "LEDGER_LISTEN_ADDR") ||
		!strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("serve on a busy -listen: %v, want an error naming -listen, LEDGER_LISTEN_ADDR and %s", err, busy.Addr())
	}
	if strings.Contains(errOut.String(), "ledgerd serving") {
		t.Errorf("serve said it was serving:\n%s", errOut.String())
	}
	if n := dials.Load(); n > 0 {
		t.Errorf("serve on a busy -listen connected to DynamoDB %d times, want none", n)
	}
}
