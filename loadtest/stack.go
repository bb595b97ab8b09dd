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

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

// env is the DynamoDB of a run: a DynamoDB Local the load test started, or
// one it was given (-dynamodb-endpoint: a URL, or AWS), on tables of the
// run's own; with -latency the proxy in front of it.
type env struct {
	endpoint string           // what ledgerd and the baselines use: the proxy, or the DynamoDB ("": AWS)
	db       *dynamodb.Client // the DynamoDB itself, for the checks and the tables
	client   *dynamodb.Client // through endpoint, for the baselines
	prefix   string           // of the run's table names
	proxy    *ddbproxy.Proxy
	stop     func()

	emulatorPid int // the DynamoDB Local this load test started; 0: none
}

// startEnv starts a fresh, in-memory DynamoDB Local (on cpus, if not ""),
// and the proxy if latency > 0 or proxy.
func startEnv(ctx context.Context, latency time.Duration, proxy bool, cpus string) (*env, error) {
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{CPUs: cpus})
	if err != nil {
		return nil, err
	}
	e := &env{endpoint: emu.Endpoint, db: dynamolocal.NewClient(emu.Endpoint), stop: emu.Stop, emulatorPid: emu.Pid()}
	if err := e.withProxy(latency, proxy, emu.Endpoint); err != nil {
		emu.Stop()
		return nil, err
	}
	return e, nil
}

// awsDynamoDB is the -dynamodb-endpoint that names AWS's DynamoDB, as the
// environment configures it (region, credentials).
const awsDynamoDB = "aws"

// givenEnv is the DynamoDB at where (a URL, or awsDynamoDB), on tables
// named with prefix, which stop deletes; the proxy in front of it if
// latency > 0 or proxy (not of AWS's: its requests are signed for the
// address they are sent to).
func givenEnv(ctx context.Context, where, prefix string, latency time.Duration, proxy bool) (*env, error) {
	e := &env{prefix: prefix}
	if where == awsDynamoDB {
		if latency > 0 || proxy {
			return nil, errors.New("-latency and -proxy put the proxy in front of DynamoDB Local, not of AWS's DynamoDB (requests are signed for the address they are sent to)")
		}
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		e.db = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = ddbhttp.Client() })
		e.client = e.db // no proxy: the baselines write where the checks read
	} else {
		e.endpoint, e.db = where, dynamolocal.NewClient(where)
		if err := e.withProxy(latency, proxy, where); err != nil {
			return nil, err
		}
	}
	closeProxy := e.stop
	e.stop = func() {
		if closeProxy != nil {
			closeProxy()
		}
		if err := dropTables(context.WithoutCancel(ctx), e.db, prefix); err != nil {
			fmt.Fprintf(os.Stderr, "loadtest: the tables %s* are left: %v\n", prefix, err)
		}
	}
	return e, nil
}

// withProxy puts the proxy in front of target, if latency > 0 or proxy,
// and sets the clients under test.
func (e *env) withProxy(latency time.Duration, proxy bool, target string) error {
	if latency > 0 || proxy {
		p, err := ddbproxy.Start(ddbproxy.Options{Target: target, Latency: latency})
		if err != nil {
			return err
		}
		e.proxy, e.endpoint = p, p.URL
		stop := e.stop
		e.stop = func() {
			p.Close()
			if stop != nil {
				stop()
			}
		}
	}
	e.client = dynamolocal.NewClient(e.endpoint)
	return nil
}

// dropTables deletes the tables whose names start with prefix.
func dropTables(ctx context.Context, db *dynamodb.Client, prefix string) error {
	pages := dynamodb.NewListTablesPaginator(db, &dynamodb.ListTablesInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, name := range page.TableNames {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *env) proxyStats() ddbproxy.Stats {
	if e == nil || e.proxy == nil {
		return ddbproxy.Stats{}
	}
	return e.proxy.Stats()
}

// ledgerdEnv is the environment that points ledgerd at e.
func (e *env) ledgerdEnv() []string {
	return []string{"LEDGER_DYNAMODB_ENDPOINT=" + e.endpoint, "LEDGER_TABLE_PREFIX=" + e.prefix}
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
// sends the samples; opsURL says where to ask each time (an instance in
// service). A target without a projector, or without an operations
// listener to ask, gives none.
func sampleLag(ctx context.Context, c *http.Client, opsURL func() string) <-chan []time.Duration {
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
			if st, err := getProjectionStatus(c, opsURL()); err == nil && st.Running {
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
