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
