package dynamotest

import (
	"syscall"
	"testing"
	"time"
)

// CPU starts counting the CPU (user and system) this process spends, for a
// benchmark of the calls that reach DynamoDB Local: report, called once the
// timed part ends, reports it per op as "cpu-ns/op". The emulator's own CPU
// is another process's, not in it.
func CPU(b *testing.B) (report func()) {
	b.Helper()
	before := processCPU(b)
	return func() {
		b.Helper()
		b.ReportMetric(float64((processCPU(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// processCPU is the CPU this process has used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
