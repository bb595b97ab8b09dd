package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkImport imports 100,000 lines over 10,000 users (IMPORT_LINES,
// IMPORT_USERS; IMPORT_CONCURRENCY in flight, 16 by default) into a
// ledgerd on this test binary's DynamoDB Local, set as the load test's
// uniform scenario is measured against it (no projector, no dispatcher;
// its successful calls are logged at debug, so not at all at info),
// and reports grants/s over the whole file. Compare, back to back on one
// machine:
//
//	go test -run '^$' -bench BenchmarkImport -benchtime 1x ./cmd/ledgerd/
//	LEDGER_PROJECTOR=false go run ./loadtest -scenario uniform -concurrency 16 -baselines=false -webhooks=false
//
// (docs/operations.md, "Moving a program in"). Run it alone: the
// emulator is the test binary's, and slows as its stream records pile up.
func BenchmarkImport(b *testing.B) {
	lines, users, concurrency := benchEnv(b, "IMPORT_LINES", 100_000), benchEnv(b, "IMPORT_USERS", 10_000), benchEnv(b, "IMPORT_CONCURRENCY", 16)
	p := startLedgerd(b, "LEDGER_PROJECTOR=false", "LEDGER_DISPATCHER=false")
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
	for i := range b.N {
		start := time.Now()
		out := importFile(context.Background(), b, p, nil, "-id-prefix", fmt.Sprintf("bench-%d", i), "-concurrency", strconv.Itoa(concurrency), path)
		elapsed += time.Since(start)
		if out.code != 0 || summaryCount(b, out, "granted") != lines {
			b.Fatalf("exit %d, want 0 and %d granted\n%s", out.code, lines, out.stdout)
		}
	}
	b.ReportMetric(float64(lines*b.N)/elapsed.Seconds(), "grants/s")
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
