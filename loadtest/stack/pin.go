package stack

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// pinnedEnv marks the load tool re-executed by PinEmulator; it holds the
// CPUs the process was allowed before, as taskset -c lists them ("0,1").
const pinnedEnv = "LOADTEST_PINNED_CPUS"

// PinEmulator gives DynamoDB Local a CPU of its own: the last CPU this process
// may use goes to the emulator, the others to the load tool and what it
// starts (ledgerd, the proxy). On a small machine the emulator is CPU-bound,
// so every millisecond ledgerd spends is otherwise taken from it, which
// measures the machine more than the service; real DynamoDB runs on other
// machines.
//
// The first call re-executes the load tool under taskset on the other CPUs
// and does not return; the re-executed one returns the emulator's CPU and,
// for the report, which CPUs went where.
func PinEmulator(args []string) (emulatorCPU, cpus string, err error) {
	if v := os.Getenv(pinnedEnv); v != "" {
		allowed, err := parseCPUList(v)
		if err != nil || len(allowed) < 2 {
			return "", "", fmt.Errorf("%s=%q: want the CPUs the load tool was allowed, two or more", pinnedEnv, v)
		}
		emulator, others := splitCPUs(allowed)
		return emulator, cpuReport(emulator, others, len(allowed)), nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "", "", fmt.Errorf("-pin-emulator: the CPUs this process may use: %w", err)
	}
	var allowed []int
	for c := 0; len(allowed) < set.Count(); c++ {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	if len(allowed) < 2 {
		return "", "", fmt.Errorf("-pin-emulator needs 2 CPUs or more; this process may use %d", len(allowed))
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return "", "", fmt.Errorf("-pin-emulator needs taskset (Debian package util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return "", "", err
	}
	_, others := splitCPUs(allowed)
	argv := append([]string{"taskset", "-c", others, self}, args...)
	env := append(os.Environ(), pinnedEnv+"="+cpuList(allowed))
	return "", "", syscall.Exec(taskset, argv, env) // returns only on failure
}

// splitCPUs gives the last of the allowed CPUs to the emulator and the rest
// to everything else, each as taskset -c lists them.
func splitCPUs(allowed []int) (emulator, others string) {
	return strconv.Itoa(allowed[len(allowed)-1]), cpuList(allowed[:len(allowed)-1])
}

// cpuReport says which CPUs went where, for the report's machine line.
func cpuReport(emulator, others string, n int) string {
	noun := "CPU"
	if strings.Contains(others, ",") {
		noun = "CPUs"
	}
	return fmt.Sprintf("%d CPUs (DynamoDB Local alone on CPU %s; the load tool, ledgerd and the proxy on %s %s)", n, emulator, noun, others)
}

func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

func parseCPUList(v string) ([]int, error) {
	var cpus []int
	for f := range strings.SplitSeq(v, ",") {
		c, err := strconv.Atoi(f)
		if err != nil || c < 0 {
			return nil, fmt.Errorf("not a CPU list: %q", v)
		}
		cpus = append(cpus, c)
	}
	return cpus, nil
}
