package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dynamolocal"
)

// BenchmarkImport imports 100,000 lines over 10,000 users (IMPORT_LINES,
// IMPORT_USERS; IMPORT_CONCURRENCY in flight, 16 by default) into a
// ledgerd on a fresh DynamoDB Local, set as the load test's
// uniform scenario is measured against it (no projector, no dispatcher;
// its successful calls are logged at debug, so not at all at info),
// and reports grants/s over the whole file. Compare, back to back on one
// machine:
//
//	go test -run '^$' -bench BenchmarkImport -benchtime 1x ./cmd/ledgerd/
//	LEDGER_PROJECTOR=false go run ./loadtest -scenario uniform -concurrency 16 -baselines=false -webhooks=false
//
// (docs/operations.md, "Moving a program in").
func BenchmarkImport(b *testing.B) {
	lines, users, concurrency := benchEnv(b, "IMPORT_LINES", 100_000), benchEnv(b, "IMPORT_USERS", 10_000), benchEnv(b, "IMPORT_CONCURRENCY", 16)
	// An emulator of its own, as the load test starts one: the JVM's
	// defaults, for the steady state (the tests' emulator is tuned for
	// short runs: C1 only, dynamolocal.TestJVMFlags).
	emu, err := dynamolocal.Start(context.Background(), dynamolocal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(emu.Stop)
	p := startLedgerd(b, "LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint, "LEDGER_PROJECTOR=false", "LEDGER_DISPATCHER=false")
	path := filepath.Join(b.TempDir(), "grants.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "user_id,amount,metadata.source")
	for i := range lines {
		fmt.Fprintf(w, "user-%d,%d,old-program\n", i%users, i%100+1)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ResetTimer()
	var elapsed time.Duration
	cpu := cpuTime(b)
	for i := range b.N {
		start := time.Now()
		var marks []mark // lines done, as the progress lines come
		progress := regexp.MustCompile(`import: (\d+)/`)
		stderr := &syncBuffer{onWrite: func(p []byte) {
			if m := progress.FindSubmatch(p); m != nil {
				n, _ := strconv.Atoi(string(m[1]))
				marks = append(marks, mark{time.Since(start), n})
			}
		}}
		out := importFile(context.Background(), b, p, stderr, "-id-prefix", fmt.Sprintf("bench-%d", i), "-concurrency", strconv.Itoa(concurrency), "-progress-interval", "2s", path)
		elapsed += time.Since(start)
		marks = append(marks, mark{time.Since(start), lines})
		first, last := quarterRates(marks)
		b.ReportMetric(first, "grants/s-first-quarter")
		b.ReportMetric(last, "grants/s-last-quarter")
		if out.code != 0 || summaryCount(b, out, "granted") != lines {
			b.Fatalf("exit %d, want 0 and %d granted\n%s", out.code, lines, out.stdout)
		}
	}
	b.ReportMetric(float64(lines*b.N)/elapsed.Seconds(), "grants/s")
	// Where the time goes: the import's own CPU (this process: reading,
	// protojson, the client) a grant; the rest is ledgerd's and the
	// emulator's.
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(lines*b.N), "import-cpu-µs/grant")
}

type mark struct {
	at   time.Duration
	done int
}

// quarterRates are the grants/s in the first and the last quarter of the
// time marks span (from 0), between the marks nearest their ends.
func quarterRates(marks []mark) (first, last float64) {
	end := marks[len(marks)-1].at
	at := func(t time.Duration) mark { // the last mark at or before t
		m := mark{}
		for _, x := range marks {
			if x.at <= t {
				m = x
			}
		}
		return m
	}
	rate := func(a, b mark) float64 {
		if b.at <= a.at {
			return 0
		}
		return float64(b.done-a.done) / (b.at - a.at).Seconds()
	}
	return rate(mark{}, at(end/4)), rate(at(end*3/4), marks[len(marks)-1])
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchEnv(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive whole number", name, v)
	}
	return n
}
