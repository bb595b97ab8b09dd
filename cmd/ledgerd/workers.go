package main

import (
	"context"
	"fmt"
	"log/slog"
)

// workers are serve's background workers (the projector, the webhook
// delivery, the sweeper), each started, stopped and waited for the same
// way. Each runs on a context of its own that serve's does not cancel
// (its values kept), so that on SIGTERM they keep working while the
// requests in flight finish, and are stopped after, one at a time, last
// started first.
type workers struct {
	log     *slog.Logger
	running []*worker
	exited  chan error // a worker that returned before it was stopped
}

type worker struct {
	name string
	stop context.CancelFunc
	done chan error // its Run's error, once it has returned
}

func newWorkers(log *slog.Logger) *workers {
	return &workers{log: log, exited: make(chan error, 16)}
}

// start runs run in a goroutine of its own until stop. A worker that
// returns before stop, even with nil, is reported on exited as
// "name: error".
func (w *workers) start(ctx context.Context, name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wk := &worker{name: name, stop: cancel, done: make(chan error, 1)}
	w.running = append(w.running, wk)
	go func() {
		err := run(ctx)
		if ctx.Err() == nil {
			exit := fmt.Errorf("%s: %w", name, err)
			if err == nil {
				exit = fmt.Errorf("%s stopped by itself", name)
			}
			select {
			case w.exited <- exit:
			default: // another has been reported: serve is stopping
			}
		}
		wk.done <- err
	}()
}

// failed is told of the first worker that returned before it was stopped.
func (w *workers) failed() <-chan error { return w.exited }

// stop stops the workers in the reverse order of their start, each
// waited for before the next is stopped, and logs the errors they stopped
// with.
func (w *workers) stop() {
	for i := len(w.running) - 1; i >= 0; i-- {
		wk := w.running[i]
		wk.stop()
		if err := <-wk.done; err != nil {
			w.log.Warn(wk.name+" stopped with an error", "error", err)
		}
	}
	w.running = nil
}

// cancel tells every worker to stop, and waits for none: for a serve that
// returns an error.
func (w *workers) cancel() {
	for _, wk := range w.running {
		wk.stop()
	}
}
