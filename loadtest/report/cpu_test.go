package report

import (
	"os"
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
