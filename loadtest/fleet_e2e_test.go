package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/pointledger/pointledger/internal/dynamotest"
)

// Two ledgerd with affinity on one DynamoDB (the test binary's DynamoDB
// Local, through -dynamodb-endpoint), one of them SIGKILLed mid-run: the
// load tool takes it out of its rotation, the other serves every user, and
// the checks pass. The report has both instances' figures, forwarding
// included.
func TestTwoInstancesAndTheKillOfOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ledgerd and runs two of them for a few seconds")
	}
	bin, _, err := buildLedgerd(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The history is caught up from the ledger before the checks; a
	// projector in each would wait out the killed one's shard lease.
	t.Setenv("LEDGER_PROJECTOR", "false")
	t.Setenv("LEDGER_SWEEPER", "false")
	out := t.TempDir()
	ok, err := run(context.Background(), []string{"-ledgerd", bin, "-dynamodb-endpoint", dynamotest.Emulator(t).Endpoint,
		"-instances", "2", "-affinity", "-kill-one", "1500ms", "-health-interval", "200ms",
		"-scenario", "uniform", "-users", "20", "-concurrency", "8", "-warmup", "1s", "-duration", "6s",
		"-baselines=false", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if !ok {
		t.Fatalf("the run failed its checks: %q", rep.Invariants.Violations)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Fleet == nil {
		t.Fatalf("runs = %+v, want one with its fleet", rep.Runs)
	}
	f := rep.Runs[0].Fleet
	// The balancer's counts and the run's are taken a moment apart, at the
	// start of the measurement and at its end: calls in flight at either
	// moment (8 at most each) may fall on either side.
	if diff := f.Total.OK - rep.Runs[0].OK; f.Instances != 2 || len(f.PerInstance) != 2 || diff < -16 || diff > 16 {
		t.Errorf("fleet = %+v, want 2 instances whose acknowledgements add up to about the run's %d", f, rep.Runs[0].OK)
	}
	if f.Total.Committed == 0 || f.Total.Groups == 0 || f.Total.Forwarded == 0 {
		t.Errorf("total = %+v, want the write path's commits and forwards from /metrics", f.Total)
	}
	k := f.Kill
	if k == nil || k.TakenOutAfterMS < 0 || k.ServedLater == 0 || len(k.Late) != 0 {
		t.Fatalf("kill = %+v, want the instance taken out and the users served after the window", k)
	}
	for _, in := range f.PerInstance {
		if in.Name == k.Instance && in.Note == "" {
			t.Errorf("the killed %s has no note", in.Name)
		}
	}
}

func readReport(t *testing.T, dir string) Report {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("reports in %s: %v, %v", dir, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
