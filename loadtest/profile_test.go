package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCPUProfileCoversTheMeasuredSeconds: -cpu-profile asks the operations
// listener for the measurement's whole seconds and writes what it answers
// to <dir>/<run>.pprof; a listener that refuses leaves a note instead.
func TestCPUProfileCoversTheMeasuredSeconds(t *testing.T) {
	var asked string
	ok := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.RequestURI()
		if !ok {
			http.Error(w, "profiling busy", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("profile bytes"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	p, err := newCPUProfile(srv.Client(), dir, "ledgerd", srv.URL, 40500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	p.begin(context.Background())
	note := p.note(context.Background())
	if asked != "/debug/pprof/profile?seconds=40" {
		t.Errorf("asked %q, want the measurement's whole 40 seconds", asked)
	}
	path := filepath.Join(dir, "ledgerd.pprof")
	if b, err := os.ReadFile(path); err != nil || string(b) != "profile bytes" {
		t.Errorf("%s: %q, %v; want the listener's answer", path, b, err)
	}
	if !strings.Contains(note, path) {
		t.Errorf("note %q does not say where the profile is", note)
	}

	ok = false
	p, err = newCPUProfile(srv.Client(), dir, "refused", srv.URL, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.begin(context.Background())
	if note := p.note(context.Background()); !strings.HasPrefix(note, "no CPU profile") || !strings.Contains(note, "profiling busy") {
		t.Errorf("a refused profile's note: %q", note)
	}
}

func TestCPUProfileOnlyWhenAskedAndPossible(t *testing.T) {
	if p, err := newCPUProfile(http.DefaultClient, "", "ledgerd", "http://127.0.0.1:1", time.Minute); p != nil || err != nil {
		t.Errorf("no -cpu-profile: %v, %v; want nothing", p, err)
	}
	if _, err := newCPUProfile(http.DefaultClient, t.TempDir(), "ledgerd", "http://127.0.0.1:1", 500*time.Millisecond); err == nil {
		t.Error("a measurement under a second: no error")
	}
	if _, err := newCPUProfile(http.DefaultClient, t.TempDir(), "ledgerd", "", time.Minute); err == nil {
		t.Error("no operations listener: no error")
	}
}
