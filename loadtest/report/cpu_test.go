package report

import (
	"html"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command with a space and a parenthesis in its name; utime 250 and
	// stime 50 ticks.
	line := "4242 (java (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 30 0 1000 0 0"
	got, err := parseProcStat(line)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseProcStat = %v, %v; want 3s", got, err)
	}
	if _, err := parseProcStat("4242 (java S 1"); err == nil {
		t.Error("a cut line parsed")
	}
	// This process, through /proc and through getrusage, has used some.
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	for _, pid := range []int{os.Getpid(), 0} {
		if d, err := cpuTime(pid); err != nil || d <= 0 {
			t.Errorf("cpuTime(%d) = %v, %v", pid, d, err)
		}
	}
}

// TestCPUCost: ledgerd's CPU per acknowledged purchase, grant and mutation,
// in the JSON, the summary and the page.
func TestCPUCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		seconds float64
		run     Run
		want    CPUCost
		summary string
	}{
		{name: "purchases alone (uniform)", seconds: 8, run: Run{PurchaseCount: 16000, Mutations: 16000},
			want:    CPUCost{Seconds: 8, PerPurchaseMS: 0.5, PerMutationMS: 0.5},
			summary: "ledgerd's own CPU 8.00 s over the measurement: 0.500 ms per acknowledged purchase, 0.500 ms per acknowledged mutation"},
		{name: "grants alone (campaign)", seconds: 1, run: Run{GrantCount: 2000, Mutations: 2000},
			want:    CPUCost{Seconds: 1, PerGrantMS: 0.5, PerMutationMS: 0.5},
			summary: "ledgerd's own CPU 1.00 s over the measurement: 0.500 ms per acknowledged grant, 0.500 ms per acknowledged mutation"},
		{name: "mixed: each kind charged all of it", seconds: 3, run: Run{PurchaseCount: 1000, GrantCount: 500, Mutations: 2000},
			want: CPUCost{Seconds: 3, PerPurchaseMS: 3, PerGrantMS: 6, PerMutationMS: 1.5}},
		{name: "nothing acknowledged", seconds: 2, want: CPUCost{Seconds: 2},
			summary: "ledgerd's own CPU 2.00 s over the measurement, nothing acknowledged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := NewCPUCost(tt.seconds, tt.run)
			if *got != tt.want {
				t.Errorf("NewCPUCost = %+v, want %+v", *got, tt.want)
			}
			if tt.summary != "" && got.Summary() != tt.summary {
				t.Errorf("Summary = %q, want %q", got.Summary(), tt.summary)
			}
			r := &Report{Runs: []Run{tt.run}}
			r.Runs[0].Name, r.Runs[0].LedgerdCPU = "ledgerd", got
			var summary strings.Builder
			r.PrintSummary(&summary)
			page := renderHTML(t, r)
			if !strings.Contains(summary.String(), "ledgerd: "+got.Summary()+"\n") {
				t.Errorf("the summary does not say %q:\n%s", got.Summary(), summary.String())
			}
			if !strings.Contains(page, "<li>"+html.EscapeString(got.Summary())+"</li>") {
				t.Errorf("the page does not say %q", got.Summary())
			}
		})
	}
}
