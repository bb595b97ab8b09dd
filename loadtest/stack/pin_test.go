package stack

import (
	"slices"
	"testing"
)

// -pin-emulator takes its CPUs from the process's affinity mask, which need
// not start at CPU 0 (a container's cpuset, a taskset around the load tool).
func TestSplitCPUs(t *testing.T) {
	for _, c := range []struct {
		allowed          []int
		emulator, others string
		report           string
	}{
		{[]int{0, 1}, "1", "0", "2 CPUs (DynamoDB Local alone on CPU 1; the load tool, ledgerd and the proxy on CPU 0)"},
		{[]int{2, 3}, "3", "2", "2 CPUs (DynamoDB Local alone on CPU 3; the load tool, ledgerd and the proxy on CPU 2)"},
		{[]int{0, 1, 4, 5}, "5", "0,1,4", "4 CPUs (DynamoDB Local alone on CPU 5; the load tool, ledgerd and the proxy on CPUs 0,1,4)"},
	} {
		emulator, others := splitCPUs(c.allowed)
		if emulator != c.emulator || others != c.others {
			t.Errorf("splitCPUs(%v) = %q, %q; want %q, %q", c.allowed, emulator, others, c.emulator, c.others)
		}
		if r := cpuReport(emulator, others, len(c.allowed)); r != c.report {
			t.Errorf("cpuReport for %v = %q; want %q", c.allowed, r, c.report)
		}
		// The re-executed load tool reads the list back from the environment.
		back, err := parseCPUList(cpuList(c.allowed))
		if err != nil || !slices.Equal(back, c.allowed) {
			t.Errorf("parseCPUList(cpuList(%v)) = %v, %v", c.allowed, back, err)
		}
	}
	for _, bad := range []string{"", "a", "1,", "0,-1", "2-3"} {
		if cpus, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", bad, cpus)
		}
	}
}
