// Command loadtest drives ledgerd and reports throughput, latency and whether
// the books still balance afterwards.
//
// This first version runs a closed loop of -concurrency clients, each
// purchasing -amount from a user picked among -users by -scenario (uniform,
// zipf with exponent 1.0, or hot: all on one user), for -duration. By default it starts a fresh DynamoDB Local (the emulator slows
// down as stream records pile up, so every run gets a new one) and the
// ledgerd binary at -ledgerd; -target URL drives a running ledgerd instead.
//
// After the run it checks every user: the balance is the grant minus the
// acknowledged purchases, and the version counts them. A violation exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	pb "github.com/pointledger/pointledger/internal/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

type options struct {
	target      string
	ledgerd     string
	concurrency int
	duration    time.Duration
	users       int
	amount      string
	grant       string
	latency     time.Duration
	scenario    string
}

func run(ctx context.Context) error {
	var o options
	flag.StringVar(&o.target, "target", "", "URL of a running ledgerd; empty: start DynamoDB Local and ledgerd")
	flag.StringVar(&o.ledgerd, "ledgerd", "bin/ledgerd", "the ledgerd binary to start when there is no -target")
	flag.IntVar(&o.concurrency, "concurrency", 16, "clients in the closed loop")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to purchase")
	flag.IntVar(&o.users, "users", 1000, "users to spread the purchases over")
	flag.StringVar(&o.amount, "amount", "1", "amount of each purchase")
	flag.StringVar(&o.grant, "grant", "1000000", "points granted to each user first")
	flag.StringVar(&o.scenario, "scenario", "uniform", "how purchases pick users: uniform, zipf (exponent 1.0) or hot (one user)")
	flag.DurationVar(&o.latency, "latency", 0, "put the DynamoDB proxy between ledgerd and the emulator: this much latency per call, and TransactionConflict like the real service")
	flag.Parse()
	if o.concurrency < 1 || o.users < 1 || o.duration <= 0 {
		return errors.New("-concurrency, -users and -duration must be positive")
	}
	switch o.scenario {
	case "uniform", "zipf":
	case "hot":
		o.users = 1
	default:
		return fmt.Errorf("-scenario %q: want uniform, zipf or hot", o.scenario)
	}
	amount, err := decimal.NewFromString(o.amount)
	if err != nil {
		return fmt.Errorf("-amount: %w", err)
	}
	grant, err := decimal.NewFromString(o.grant)
	if err != nil {
		return fmt.Errorf("-grant: %w", err)
	}

	var proxy *ddbproxy.Proxy
	if o.target == "" {
		target, stop, p, err := startStack(ctx, o.ledgerd, o.latency)
		if err != nil {
			return err
		}
		proxy = p
		defer stop()
		o.target = target
	}
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2}}
	client := pointledgerv1connect.NewLedgerServiceClient(httpClient, o.target)
	runID := fmt.Sprintf("%x", time.Now().UnixNano())
	users := make([]string, o.users)
	for i := range users {
		users[i] = fmt.Sprintf("lt-%s-%d", runID, i)
	}

	fmt.Printf("granting %s to %d users...\n", grant, o.users)
	if err := parallel(ctx, o.concurrency, len(users), func(i int) error {
		_, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: users[i], Amount: grant.String(), RequestId: "grant"}))
		return err
	}); err != nil {
		return fmt.Errorf("grant: %w", err)
	}

	fmt.Printf("purchasing: %d clients, closed loop, %s, %d users, %s\n", o.concurrency, o.duration, o.users, o.scenario)
	pick := pickUniform(o.users)
	if o.scenario == "zipf" {
		pick = pickZipf(o.users)
	}
	acked := make([]atomic.Int64, o.users)
	var codesMu sync.Mutex
	codes := map[string]int{}
	latencies := make([][]time.Duration, o.concurrency)
	var before ddbproxy.Stats
	if proxy != nil {
		before = proxy.Stats()
	}
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	start := time.Now()
	lags := sampleLag(runCtx, httpClient, o.target+"/projection/status")
	var lastMu sync.Mutex
	var last *pb.Entry // the last acknowledged purchase
	var wg sync.WaitGroup
	for w := range o.concurrency {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for n := 0; runCtx.Err() == nil; n++ {
				u := pick(rng)
				t0 := time.Now()
				res, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{
					UserId: users[u], Amount: amount.String(), RequestId: fmt.Sprintf("p-%d-%d", w, n),
				}))
				if err == nil {
					lastMu.Lock()
					if last == nil || res.Msg.Entry.CreateTime.AsTime().After(last.CreateTime.AsTime()) {
						last = res.Msg.Entry
					}
					lastMu.Unlock()
				}
				latencies[w] = append(latencies[w], time.Since(t0))
				code := "ok"
				if err != nil {
					code = connect.CodeOf(err).String()
				} else {
					acked[u].Add(1)
				}
				codesMu.Lock()
				codes[code]++
				codesMu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	all := slices.Concat(latencies...)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	fmt.Printf("\n%s  target %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), o.target)
	fmt.Printf("requests     %d in %s\n", len(all), elapsed.Round(time.Millisecond))
	fmt.Printf("purchases/s  %.0f (acknowledged)\n", float64(codes["ok"])/elapsed.Seconds())
	fmt.Printf("latency      p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
		ms(pct(0.50)), ms(pct(0.90)), ms(pct(0.99)), ms(pct(0.999)), ms(pct(1)))
	var codeList []string
	for c, n := range codes {
		codeList = append(codeList, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(codeList)
	fmt.Printf("outcomes     %s\n", strings.Join(codeList, " "))
	if proxy != nil && codes["ok"] > 0 {
		after := proxy.Stats()
		writes := after.ItemWrites[migrations.LedgerTable] - before.ItemWrites[migrations.LedgerTable]
		fmt.Printf("dynamodb     %.2f ledger item writes per acknowledged purchase (%d items, %d transactions, %d cancelled for conflict)\n",
			float64(writes)/float64(codes["ok"]), writes, after.Transactions-before.Transactions, after.Conflicts-before.Conflicts)
	}

	if l := <-lags; len(l) > 0 {
		slices.Sort(l)
		fmt.Printf("projection   lag p50 %s  max %s  (%d samples of /projection/status, every 500ms)\n",
			ms(l[len(l)/2]), ms(l[len(l)-1]), len(l))
	}
	if last != nil {
		if d, err := historyDelay(ctx, client, last); err != nil {
			fmt.Printf("projection   %v\n", err)
		} else {
			fmt.Printf("projection   the last purchase was in ListHistory %s after it was committed\n", ms(d))
		}
	}

	fmt.Printf("checking %d users...\n", o.users)
	var violations atomic.Int64
	if err := parallel(ctx, o.concurrency, len(users), func(i int) error {
		res, err := client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: users[i]}))
		if err != nil {
			return err
		}
		n := acked[i].Load()
		want := grant.Sub(amount.Mul(decimal.NewFromInt(n)))
		if got, _ := decimal.NewFromString(res.Msg.Balance); !got.Equal(want) || res.Msg.Version != n+1 {
			violations.Add(1)
			fmt.Printf("VIOLATION %s: balance %s version %d, want %s and %d\n", users[i], res.Msg.Balance, res.Msg.Version, want, n+1)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	fmt.Printf("invariants   %d violations (balance = grant - acknowledged purchases, version = 1 + purchases)\n", violations.Load())
	if violations.Load() > 0 || codes["ok"] == 0 {
		return errors.New("the run failed its checks")
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// parallel runs f(0..n-1) on k goroutines and returns the first error.
func parallel(ctx context.Context, k, n int, f func(int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// startStack starts a fresh, in-memory DynamoDB Local and ledgerd on free
// ports, and returns ledgerd's URL and a function that stops both.
func startStack(ctx context.Context, ledgerd string, latency time.Duration) (string, func(), *ddbproxy.Proxy, error) {
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{})
	if err != nil {
		return "", nil, nil, err
	}
	endpoint := emu.Endpoint
	var proxy *ddbproxy.Proxy
	if latency > 0 {
		if proxy, err = ddbproxy.Start(ddbproxy.Options{Target: emu.Endpoint, Latency: latency}); err != nil {
			emu.Stop()
			return "", nil, nil, err
		}
		endpoint = proxy.URL
		fmt.Printf("DynamoDB proxy %s: %s per call, TransactionConflict on items in flight\n", proxy.URL, latency)
	}
	env := append(os.Environ(), "LEDGER_DYNAMODB_ENDPOINT="+endpoint, "LEDGER_LOG_LEVEL=warn")
	migrate := exec.CommandContext(ctx, ledgerd, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		emu.Stop()
		return "", nil, nil, fmt.Errorf("ledgerd migrate: %w\n%s", err, out)
	}
	port, err := dynamolocal.FreePort()
	if err != nil {
		emu.Stop()
		return "", nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	serve := exec.Command(ledgerd, "serve", "-listen", addr)
	serve.Env, serve.Stderr = env, os.Stderr
	if err := serve.Start(); err != nil {
		emu.Stop()
		return "", nil, nil, err
	}
	stop := func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		if proxy != nil {
			st := proxy.Stats()
			fmt.Printf("proxy        %d calls, %d transactions, %d cancelled for conflict\n", st.Calls, st.Transactions, st.Conflicts)
			proxy.Close()
		}
		emu.Stop()
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, nil, fmt.Errorf("ledgerd did not become healthy: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("started DynamoDB Local %s (fresh, in memory) and ledgerd %s\n", emu.Endpoint, addr)
	return "http://" + addr, stop, proxy, nil
}

// sampleLag reads the projector's lag every 500ms until ctx ends, and then
// sends the samples. A target without a projector gives none.
func sampleLag(ctx context.Context, c *http.Client, url string) <-chan []time.Duration {
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
			var st struct {
				Running bool  `json:"running"`
				Lag     int64 `json:"lag_ns"`
			}
			res, err := c.Get(url)
			if err != nil {
				continue
			}
			err = json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
			if err == nil && st.Running {
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
	return 0, fmt.Errorf("the last purchase was not in ListHistory 30 s after the run")
}

// pickUniform picks any of n users alike.
func pickUniform(n int) func(*rand.Rand) int {
	return func(rng *rand.Rand) int { return rng.IntN(n) }
}

// pickZipf picks user k (from 0) with probability proportional to 1/(k+1):
// Zipf's law with exponent 1.0, where a few users take most purchases.
func pickZipf(n int) func(*rand.Rand) int {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / float64(k+1)
		cdf[k] = sum
	}
	return func(rng *rand.Rand) int {
		x := rng.Float64() * sum
		k, _ := slices.BinarySearch(cdf, x)
		return min(k, n-1)
	}
}
