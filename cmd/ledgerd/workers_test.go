package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Workers are stopped last started first, each waited for before the
// next is told, and the errors they stop with are logged; serve's context
// ending does not stop them.
func TestWorkersStopInReverseOrder(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	w := newWorkers(slog.New(slog.NewTextHandler(&logs, nil)))
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan context.Context, 3)
	for _, name := range []string{"projector", "webhook delivery", "sweeper"} {
		w.start(ctx, name, func(ctx context.Context) error {
			started <- ctx
			<-ctx.Done()
			record(name + " stopping")
			if name == "webhook delivery" {
				return errors.New("attempts cut short")
			}
			record(name + " stopped")
			return nil
		})
	}
	cancel() // serve's context: the workers go on until stop
	for range 3 {
		if wctx := <-started; wctx.Err() != nil {
			t.Fatalf("a worker's context ended with serve's: %v", wctx.Err())
		}
	}
	w.stop()

	want := []string{"sweeper stopping", "sweeper stopped", "webhook delivery stopping", "projector stopping", "projector stopped"}
	if !slices.Equal(events, want) {
		t.Errorf("events = %q, want %q", events, want)
	}
	if got := logs.String(); !strings.Contains(got, `msg="webhook delivery stopped with an error" error="attempts cut short"`) ||
		strings.Count(got, "stopped with an error") != 1 {
		t.Errorf("logged %q, want the delivery's error alone", got)
	}
}

// A worker that returns before it is stopped is reported, with its
// error, or as stopped by itself.
func TestAWorkerThatReturnsIsReported(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"with an error", errors.New("lease table gone"), "projector: lease table gone"},
		{"with nil", nil, "projector stopped by itself"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorkers(slog.New(slog.DiscardHandler))
			w.start(context.Background(), "projector", func(context.Context) error { return tt.err })
			err := <-w.failed()
			if err == nil || err.Error() != tt.want || tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("failed = %v, want %q", err, tt.want)
			}
			w.stop() // waits for it, already returned
		})
	}
}
