package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// cpuProfile takes a CPU profile of one ledgerd instance over a run's
// measured window (-cpu-profile): it asks the instance's operations
// listener for /debug/pprof/profile when the measurement begins, for the
// whole seconds of the measurement, and writes what it answers to path. A
// profile asked for by hand (curl) lands wherever the hand's timing puts
// it; this one covers the window the report's CPU per purchase is counted
// over, and nothing of the warm-up.
type cpuProfile struct {
	c       *http.Client
	opsURL  string
	path    string
	seconds int
	done    chan error // the profile's one outcome, once begun
}

// newCPUProfile returns nil when dir is empty (no profile asked for).
func newCPUProfile(c *http.Client, dir, run, opsURL string, measured time.Duration) (*cpuProfile, error) {
	if dir == "" {
		return nil, nil
	}
	seconds := int(measured / time.Second)
	if seconds < 1 {
		return nil, fmt.Errorf("-cpu-profile: a profile is taken in whole seconds, and -duration %s has none", measured)
	}
	if opsURL == "" {
		return nil, fmt.Errorf("-cpu-profile: %s has no operations listener to ask", run)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-cpu-profile: %w", err)
	}
	return &cpuProfile{c: c, opsURL: opsURL, path: filepath.Join(dir, run+".pprof"), seconds: seconds, done: make(chan error, 1)}, nil
}

// begin starts the profile; the recorder calls it as the measurement begins.
func (p *cpuProfile) begin(ctx context.Context) {
	go func() { p.done <- p.take(ctx) }()
}

func (p *cpuProfile) take(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.opsURL, p.seconds), nil)
	if err != nil {
		return err
	}
	res, err := p.c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("%s: %s: %s", req.URL, res.Status, b)
	}
	f, err := os.Create(p.path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// note waits for the profile and says where it is (or why there is none),
// for the run's notes.
func (p *cpuProfile) note(ctx context.Context) string {
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Sprintf("no CPU profile: %v", err)
		}
		return fmt.Sprintf("CPU profile of ledgerd over the first %d s of the measurement: %s (loadtest/cpushares.sh %s)", p.seconds, p.path, p.path)
	case <-ctx.Done():
		return "no CPU profile: " + ctx.Err().Error()
	}
}
