package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

// env is a DynamoDB the load test started: DynamoDB Local, and with
// -latency the proxy in front of it.
type env struct {
	emulator string           // DynamoDB Local, for the checks
	endpoint string           // what the clients under test use: the proxy or the emulator
	db       *dynamodb.Client // on the emulator
	proxy    *ddbproxy.Proxy
	stop     func()
}

// startEnv starts a fresh, in-memory DynamoDB Local (on cpus, if not ""),
// and the proxy if latency > 0 or proxy.
func startEnv(ctx context.Context, latency time.Duration, proxy bool, cpus string) (*env, error) {
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{CPUs: cpus})
	if err != nil {
		return nil, err
	}
	e := &env{emulator: emu.Endpoint, endpoint: emu.Endpoint, db: dynamolocal.NewClient(emu.Endpoint), stop: emu.Stop}
	if latency > 0 || proxy {
		if e.proxy, err = ddbproxy.Start(ddbproxy.Options{Target: emu.Endpoint, Latency: latency}); err != nil {
			emu.Stop()
			return nil, err
		}
		e.endpoint = e.proxy.URL
		e.stop = func() { e.proxy.Close(); emu.Stop() }
	}
	return e, nil
}

func (e *env) proxyStats() ddbproxy.Stats {
	if e == nil || e.proxy == nil {
		return ddbproxy.Stats{}
	}
	return e.proxy.Stats()
}

// startLedgerd migrates e's tables and starts ledgerd on them, on free
// ports, with fresh credentials, and args added to its serve's; it returns
// ledgerd's URL, its operations listener's (for the projection's status), a
// service token and how to stop it.
func startLedgerd(ctx context.Context, bin string, e *env, args ...string) (url, opsURL, token string, stop func(), err error) {
	creds := auth.GenerateDev()
	environ := append(os.Environ(), "LEDGER_DYNAMODB_ENDPOINT="+e.endpoint, "LEDGER_LOG_LEVEL=warn",
		"LEDGER_AUTH_FILE=", "LEDGER_AUTH_JSON="+string(creds.Credentials.JSON()))
	migrate := exec.CommandContext(ctx, bin, "migrate")
	migrate.Env = environ
	if out, err := migrate.CombinedOutput(); err != nil {
		return "", "", "", nil, fmt.Errorf("ledgerd migrate: %w\n%s", err, out)
	}
	// Ports of our choosing rather than 0: ledgerd logs the bound addresses
	// at info, and the load test runs it at warn. Not the operations
	// listener's default either, which another ledgerd on this machine may
	// hold.
	var addrs [2]string
	for i := range addrs {
		port, err := dynamolocal.FreePort()
		if err != nil {
			return "", "", "", nil, err
		}
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	serve := exec.Command(bin, append([]string{"serve", "-listen", addrs[0], "-ops-listen", addrs[1]}, args...)...)
	serve.Env, serve.Stderr = environ, os.Stderr
	if err := serve.Start(); err != nil {
		return "", "", "", nil, err
	}
	stop = func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}
	url = "http://" + addrs[0]
	if err := waitHealthy(ctx, url, 30*time.Second); err != nil {
		stop()
		return "", "", "", nil, err
	}
	return url, "http://" + addrs[1], creds.ServiceToken, stop, nil
}

// waitHealthy waits for GET /healthz to answer 200.
func waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := http.Get(url + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", res.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ledgerd at %s did not become healthy: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// projectionStatus is ledgerd's GET /projection/status, on its operations
// listener.
type projectionStatus struct {
	Running bool  `json:"running"`
	Lag     int64 `json:"lag_ns"`
}

func getProjectionStatus(c *http.Client, opsURL string) (projectionStatus, error) {
	var st projectionStatus
	if opsURL == "" {
		return st, errors.New("no operations listener to ask (-target-ops)")
	}
	res, err := c.Get(opsURL + "/projection/status")
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /projection/status: %s", res.Status)
	}
	return st, json.NewDecoder(res.Body).Decode(&st)
}

// sampleLag reads the projector's lag every 500ms until ctx ends, and then
// sends the samples. A target without a projector, or without an
// operations listener to ask, gives none.
func sampleLag(ctx context.Context, c *http.Client, opsURL string) <-chan []time.Duration {
	out := make(chan []time.Duration, 1)
	go func() {
		var lags []time.Duration
		defer func() { out <- lags }()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st, err := getProjectionStatus(c, opsURL); err == nil && st.Running {
				lags = append(lags, time.Duration(st.Lag))
			}
		}
	}()
	return out
}

// historyDelay waits for e to show in its user's history and returns how
// long after e's commit that was (at most 30 s).
func historyDelay(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, e *pb.Entry) (time.Duration, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: e.UserId, PageSize: 1}))
		if err != nil {
			return 0, err
		}
		if len(res.Msg.Items) > 0 && res.Msg.Items[0].Version >= e.Version {
			return time.Since(e.CreateTime.AsTime()), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("the last purchase (or capture) was not in ListHistory 30 s after the run")
}

// pinnedEnv marks the load tool re-executed by pinEmulator; it holds the
// CPUs the process was allowed before, as taskset -c lists them ("0,1").
const pinnedEnv = "LOADTEST_PINNED_CPUS"

// pinEmulator gives DynamoDB Local a CPU of its own: the last CPU this process
// may use goes to the emulator, the others to the load tool and what it
// starts (ledgerd, the proxy). On a small machine the emulator is CPU-bound,
// so every millisecond ledgerd spends is otherwise taken from it, which
// measures the machine more than the service; real DynamoDB runs on other
// machines.
//
// The first call re-executes the load tool under taskset on the other CPUs
// and does not return; the re-executed one returns the emulator's CPU and,
// for the report, which CPUs went where.
func pinEmulator(args []string) (emulatorCPU, cpus string, err error) {
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
