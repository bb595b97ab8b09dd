// Package stack starts what a load test's run runs on: a DynamoDB (a fresh
// DynamoDB Local, or one it is given, on tables of the run's own), the
// DynamoDB proxy in front of it, the ledgerd instances built from the
// checkout, and the load balancer the load tool plays in front of them.
package stack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// Env is the DynamoDB of a run: a DynamoDB Local the load test started, or
// one it was given (-dynamodb-endpoint: a URL, or AWS), on tables of the
// run's own; with -latency the proxy in front of it.
type Env struct {
	endpoint string           // what ledgerd and the baselines use: the proxy, or the DynamoDB ("": AWS)
	DB       *dynamodb.Client // the DynamoDB itself, for the checks and the tables
	Client   *dynamodb.Client // through endpoint, for the baselines
	Prefix   string           // of the run's table names
	proxy    *ddbproxy.Proxy
	shutdown func()

	EmulatorPid int // the DynamoDB Local this load test started; 0: none
}

// Proxy says whether the DynamoDB proxy stands in front of the DynamoDB
// Local of a run, and what it does there.
type Proxy struct {
	On             bool          // -proxy: to count, even without the others
	Latency        time.Duration // -latency: added to every call
	PartitionScale float64       // -partition-scale: DynamoDB's per-partition limits times this; 0: none
}

// wanted says whether the proxy is in: any of its options puts it in.
func (p Proxy) wanted() bool { return p.On || p.Latency > 0 || p.PartitionScale > 0 }

// StartEnv starts a fresh, in-memory DynamoDB Local (on cpus, if not ""),
// and the proxy if proxy wants it.
func StartEnv(ctx context.Context, proxy Proxy, cpus string) (*Env, error) {
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{CPUs: cpus})
	if err != nil {
		return nil, err
	}
	e := &Env{endpoint: emu.Endpoint, DB: dynamolocal.NewClient(emu.Endpoint), shutdown: emu.Stop, EmulatorPid: emu.Pid()}
	if err := e.withProxy(proxy, emu.Endpoint); err != nil {
		emu.Stop()
		return nil, err
	}
	return e, nil
}

// AWSDynamoDB is the -dynamodb-endpoint that names AWS's DynamoDB, as the
// environment configures it (region, credentials).
const AWSDynamoDB = "aws"

// GivenEnv is the DynamoDB at where (a URL, or awsDynamoDB), on tables
// named with prefix, which stop deletes; the proxy in front of it if
// proxy wants it (not of AWS's: its requests are signed for the address
// they are sent to).
func GivenEnv(ctx context.Context, where, prefix string, proxy Proxy) (*Env, error) {
	e := &Env{Prefix: prefix}
	if where == AWSDynamoDB {
		if proxy.wanted() {
			return nil, errors.New("-latency, -proxy and -partition-scale put the proxy in front of DynamoDB Local, not of AWS's DynamoDB (requests are signed for the address they are sent to)")
		}
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		e.DB = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = ddbhttp.OneWrite(ddbhttp.Client()) })
		e.Client = e.DB // no proxy: the baselines write where the checks read
	} else {
		e.endpoint, e.DB = where, dynamolocal.NewClient(where)
		if err := e.withProxy(proxy, where); err != nil {
			return nil, err
		}
	}
	closeProxy := e.shutdown
	e.shutdown = func() {
		if closeProxy != nil {
			closeProxy()
		}
		if err := dropTables(context.WithoutCancel(ctx), e.DB, prefix); err != nil {
			fmt.Fprintf(os.Stderr, "loadtest: the tables %s* are left: %v\n", prefix, err)
		}
	}
	return e, nil
}

// withProxy puts the proxy in front of target, if proxy wants it, and sets
// the clients under test.
func (e *Env) withProxy(proxy Proxy, target string) error {
	if proxy.wanted() {
		p, err := ddbproxy.Start(ddbproxy.Options{Target: target, Latency: proxy.Latency,
			Limits: ddbproxy.Limits{PartitionScale: proxy.PartitionScale}})
		if err != nil {
			return err
		}
		e.proxy, e.endpoint = p, p.URL
		stop := e.shutdown
		e.shutdown = func() {
			p.Close()
			if stop != nil {
				stop()
			}
		}
	}
	e.Client = dynamolocal.NewClient(e.endpoint)
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

// ProxyStats are what the proxy counted so far (none without a proxy).
func (e *Env) ProxyStats() ddbproxy.Stats {
	if e == nil || e.proxy == nil {
		return ddbproxy.Stats{}
	}
	return e.proxy.Stats()
}

// ledgerdEnv is the environment that points ledgerd at e.
func (e *Env) ledgerdEnv() []string {
	return []string{"LEDGER_DYNAMODB_ENDPOINT=" + e.endpoint, "LEDGER_TABLE_PREFIX=" + e.Prefix}
}

// CountProxy has rec take the proxy's counts when it begins and ends
// measuring; AddProxyFigures adds their difference to the run.
func CountProxy(rec *drive.Recorder, e *Env) (before, after *ddbproxy.Stats) {
	before, after = new(ddbproxy.Stats), new(ddbproxy.Stats)
	rec.OnMeasure(func() { *before = e.ProxyStats() }, func() { *after = e.ProxyStats() })
	return before, after
}

// AddProxyFigures adds what the proxy counted while the run was measured.
func AddProxyFigures(run *report.Run, e *Env, table string, before, after *ddbproxy.Stats) {
	if e == nil || e.proxy == nil || run.Mutations == 0 {
		return
	}
	writes := after.ItemWrites[table] - before.ItemWrites[table]
	if run.Purchases > 0 {
		run.ItemWritesPerPurchase = float64(writes) / (run.Purchases * run.DurationS)
	}
	run.ItemWritesPerMutation = float64(writes) / float64(run.Mutations)
	run.Transactions, run.Conflicts = after.Transactions-before.Transactions, after.Conflicts-before.Conflicts
	if units := after.Units[table].Write - before.Units[table].Write; units > 0 && run.Purchases > 0 {
		run.WriteUnitsPerPurchase = units / (run.Purchases * run.DurationS)
	}
	run.Throttles = throttlesBetween(before, after, e.Prefix)
	// Where DynamoDB's time went, by operation.
	var parts []string
	var total time.Duration
	for _, op := range slices.Sorted(maps.Keys(after.Ops)) {
		st := after.Ops[op]
		st.Calls -= before.Ops[op].Calls
		st.Time -= before.Ops[op].Time
		if st.Calls > 0 {
			total += st.Time
			parts = append(parts, fmt.Sprintf("%s %d calls, %.1fms each", op, st.Calls, float64(st.Time.Microseconds())/1000/float64(st.Calls)))
		}
	}
	run.Notes = append(run.Notes, fmt.Sprintf("DynamoDB (all tables) answered in %s summed over calls: %s", total.Round(time.Millisecond), strings.Join(parts, "; ")))
}

// throttlesBetween are the requests the proxy throttled between before and
// after, by table (named without the run's prefix) and key kind.
func throttlesBetween(before, after *ddbproxy.Stats, prefix string) map[string]map[string]int64 {
	var out map[string]map[string]int64
	for table, byKind := range after.Throttles {
		for kind, n := range byKind {
			if n -= before.Throttles[table][kind]; n > 0 {
				if out == nil {
					out = map[string]map[string]int64{}
				}
				name := strings.TrimPrefix(table, prefix)
				if out[name] == nil {
					out[name] = map[string]int64{}
				}
				out[name][kind] = n
			}
		}
	}
	return out
}

// Stop stops what e started (the proxy, the emulator) and deletes the
// tables of a run on a DynamoDB it was given.
func (e *Env) Stop() {
	if e.shutdown != nil {
		e.shutdown()
	}
}
