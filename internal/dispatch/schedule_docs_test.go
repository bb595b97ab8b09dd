package dispatch_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
)

// scheduleSentence is where docs/operations.md states the default retry
// schedule: its delays as -webhook-retry-delays takes them, the jitter, the
// attempts and their span, in days and hours.
var scheduleSentence = regexp.MustCompile("tried again after\\s+`([^`]+)`\\s+\\(the default of\\s+`-webhook-retry-delays`\\),\\s+each\\s+±(\\d+)%\\s+at\\s+random:\\s+(\\d+)\\s+attempts\\s+over\\s+about\\s+([\\d.]+)\\s+days\\s+\\(([\\d.]+)\\s+h\\)")

// scheduleFigures are the ways a page could state the default schedule
// (issue 31 found design.md at 8 attempts over 27.6 h beside the README's
// and operations.md's 10 over 3.1 days): its first delays, in either
// spelling, or a span of attempts.
var scheduleFigures = regexp.MustCompile(`(?i)5\s?s,\s?5\s?m|\d+\s+attempts\s+over|\d+(\.\d+)?\s+(h|hours|days)\b.{0,40}±\d+%|three days|\b3(\.1)? days|27\.6|75\.6`)

// TestDocsTellTheDefaultScheduleOnce: the docs state the default retry
// schedule in one place, docs/operations.md's "Retries, FAILED and
// redelivery", with the figures of dispatch.DefaultSchedule; every other
// page links there.
func TestDocsTellTheDefaultScheduleOnce(t *testing.T) {
	t.Parallel()
	s := dispatch.DefaultSchedule
	var total time.Duration
	for _, d := range s.Delays {
		total += d
	}
	ops := readDoc(t, "docs/operations.md")
	m := scheduleSentence.FindStringSubmatch(ops)
	if m == nil {
		t.Fatalf("docs/operations.md does not state the default schedule as %q", scheduleSentence)
	}
	var delays []string
	for _, d := range s.Delays {
		delays = append(delays, shortDuration(d))
	}
	if got, want := m[1], strings.Join(delays, ","); got != want {
		t.Errorf("docs/operations.md: delays %s, dispatch.DefaultSchedule's are %s", got, want)
	}
	if got, want := m[2], strconv.Itoa(int(math.Round(s.Jitter*100))); got != want {
		t.Errorf("docs/operations.md: ±%s%%, the jitter is ±%s%%", got, want)
	}
	if got, want := m[3], strconv.Itoa(s.Attempts()); got != want {
		t.Errorf("docs/operations.md: %s attempts, the schedule makes %s", got, want)
	}
	if got, want := m[4], fmt.Sprintf("%.1f", total.Hours()/24); got != want {
		t.Errorf("docs/operations.md: over %s days, the delays sum to %s", got, want)
	}
	if got, want := m[5], fmt.Sprintf("%.1f", total.Hours()); got != want {
		t.Errorf("docs/operations.md: over %s h, the delays sum to %s", got, want)
	}

	// Nowhere else: the other pages link to it.
	pages := map[string]string{"docs/operations.md": strings.Replace(ops, m[0], "", 1)}
	for _, pattern := range []string{"README.md", "CONTRIBUTING.md", "docs/*.md", "examples/*.md", "examples/*/*.md"} {
		paths, err := filepath.Glob(filepath.Join("..", "..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			name := filepath.ToSlash(strings.TrimPrefix(p, filepath.Join("..", "..")+string(filepath.Separator)))
			if _, ok := pages[name]; !ok {
				pages[name] = readDoc(t, name)
			}
		}
	}
	if len(pages) < 8 {
		t.Fatalf("read %d pages, want README.md, CONTRIBUTING.md and docs/", len(pages))
	}
	for name, text := range pages {
		for _, loc := range scheduleFigures.FindAllStringIndex(text, -1) {
			line := strings.Count(text[:loc[0]], "\n") + 1
			t.Errorf("%s:%d states the retry schedule (%q); link to docs/operations.md#retries-failed-and-redelivery instead",
				name, line, text[loc[0]:loc[1]])
		}
	}
}

// shortDuration is d as an operator writes it in -webhook-retry-delays:
// 5s, 5m, 2h.
func shortDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	default:
		return d.String()
	}
}

func readDoc(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(name)))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
