package report

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the CPU a process has used so far: that of pid (read from
// /proc, Linux), or the load tool's own with pid 0 (the proxy runs in it).
func cpuTime(pid int) (time.Duration, error) {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, err
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime from a /proc/<pid>/stat line, whose
// second field (the command, in parentheses) may hold spaces. They count
// ticks of USER_HZ, which Linux fixes at 100 a second for /proc.
func parseProcStat(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: %q", line)
	}
	fields := strings.Fields(line[i+1:]) // from the third field, state
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat: %q", line)
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}

// CPUWatch measures what CPU the emulator and the load tool use while a
// run is measured, for where a run's time went when they share the
// machine with ledgerd.
type CPUWatch struct {
	pids         []int // emulator (if any), then the load tool (0)
	names        []string
	before, used []time.Duration
	began        time.Time
	took         time.Duration
}

// NewCPUWatch watches the load tool and, if emulatorPid is not 0, the
// DynamoDB Local it started; Begin and End bracket the measurement.
func NewCPUWatch(emulatorPid int) *CPUWatch {
	w := &CPUWatch{pids: []int{0}, names: []string{"the load tool (with the proxy)"}}
	if emulatorPid != 0 {
		w.pids, w.names = []int{emulatorPid, 0}, []string{"DynamoDB Local", "the load tool (with the proxy)"}
	}
	return w
}

// Begin reads the CPU used so far.
func (w *CPUWatch) Begin() {
	w.began = time.Now()
	w.before = make([]time.Duration, len(w.pids))
	for i, pid := range w.pids {
		w.before[i], _ = cpuTime(pid)
	}
}

// End reads what was used since Begin.
func (w *CPUWatch) End() {
	w.took = time.Since(w.began)
	w.used = make([]time.Duration, len(w.pids))
	for i, pid := range w.pids {
		if t, err := cpuTime(pid); err == nil {
			w.used[i] = t - w.before[i]
		}
	}
}

// Note says how many CPUs each kept busy, and the instances besides
// (from their metrics; negative: unknown).
func (w *CPUWatch) Note(instances float64) string {
	if w.took <= 0 {
		return ""
	}
	var parts []string
	for i, name := range w.names {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, w.used[i].Seconds()/w.took.Seconds()))
	}
	if instances >= 0 {
		parts = append(parts, fmt.Sprintf("ledgerd %.2f", instances))
	}
	return "CPUs kept busy on average while measured: " + strings.Join(parts, ", ")
}

// CPUCost is the CPU ledgerd used over a run's measurement, every
// instance's (from their process_cpu_seconds_total), and that CPU per
// request it acknowledged: what a fleet on DynamoDB pays for, whatever the
// emulator bounds (issue 37). Each figure per kind charges all of the CPU
// to that kind, reads and the other kinds included: per purchase is
// exact for a run of purchases alone (uniform, zipf, hot), per grant for
// one of grants alone (campaign's).
type CPUCost struct {
	Seconds       float64 `json:"seconds"`
	PerPurchaseMS float64 `json:"per_purchase_ms,omitempty"` // per acknowledged purchase, replays left out
	PerGrantMS    float64 `json:"per_grant_ms,omitempty"`    // per acknowledged grant, replays left out
	PerMutationMS float64 `json:"per_mutation_ms,omitempty"` // per acknowledged mutation of any kind
}

// NewCPUCost is seconds of ledgerd's CPU over run's measurement, per what
// run acknowledged.
func NewCPUCost(seconds float64, run Run) *CPUCost {
	per := func(n int64) float64 {
		if n <= 0 {
			return 0
		}
		return seconds * 1000 / float64(n)
	}
	return &CPUCost{Seconds: seconds, PerPurchaseMS: per(run.PurchaseCount), PerGrantMS: per(run.GrantCount), PerMutationMS: per(run.Mutations)}
}

// Summary is the cost in words, for the summary and the page.
func (c *CPUCost) Summary() string {
	s := fmt.Sprintf("ledgerd's own CPU %.2f s over the measurement", c.Seconds)
	var per []string
	for _, f := range []struct {
		ms   float64
		what string
	}{{c.PerPurchaseMS, "per acknowledged purchase"}, {c.PerGrantMS, "per acknowledged grant"}, {c.PerMutationMS, "per acknowledged mutation"}} {
		if f.ms > 0 {
			per = append(per, fmt.Sprintf("%.3f ms %s", f.ms, f.what))
		}
	}
	if len(per) == 0 {
		return s + ", nothing acknowledged"
	}
	return s + ": " + strings.Join(per, ", ")
}
