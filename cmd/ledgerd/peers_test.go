package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// startDeployment starts n ledgerd on one ledger (the same tables and
// credentials), on ports chosen first, so that args(i, urls) can give
// instance i the URLs of all of them. No projector and no sweeper: what
// each commits is then only what it is asked.
func startDeployment(t *testing.T, n int, args func(i int, urls []string) []string) []*ledgerdProcess {
	t.Helper()
	first := newLedgerd(t, false, "LEDGER_PROJECTOR=false", "LEDGER_SWEEPER=false")
	ps := []*ledgerdProcess{first}
	for len(ps) < n {
		ps = append(ps, first.another(t))
	}
	var urls []string
	for _, p := range ps {
		urls = append(urls, "http://"+p.addr)
	}
	for i, p := range ps {
		p.start(t, args(i, urls)...)
	}
	return ps
}

// committed is how many mutations p's write path committed, as entries or
// recorded refusals (pointledger_group_commit_size's sum).
func committed(t *testing.T, p *ledgerdProcess) float64 {
	t.Helper()
	return sample(scrape(t, p.opsAddr), "pointledger_group_commit_size").GetHistogram().GetSampleSum()
}

func counter(t *testing.T, p *ledgerdProcess, name string, labels ...string) float64 {
	t.Helper()
	return sample(scrape(t, p.opsAddr), name, labels...).GetCounter().GetValue()
}

// waitForPeers waits until each of ps sees live instances live, itself
// included, and down down. The deadline bounds a hang; it says nothing
// about speed.
func waitForPeers(t *testing.T, live, down float64, ps ...*ledgerdProcess) {
	t.Helper()
	for _, p := range ps {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			families := scrape(t, p.opsAddr)
			l := sample(families, "pointledger_peers", "state", "live").GetGauge().GetValue()
			d := sample(families, "pointledger_peers", "state", "down").GetGauge().GetValue()
			if l == live && d == down {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %v peers live and %v down after 2 minutes, want %v and %v", p.addr, l, d, live, down)
			}
		}
	}
}

// usersOf returns k users that each of peers owns among peers.
func usersOf(peers []string, k int) map[string][]string {
	out := map[string][]string{}
	for i := 0; len(out) < len(peers) || !enough(out, k); i++ {
		u := fmt.Sprint("user-", i)
		if o := affinity.Owner(u, peers); len(out[o]) < k {
			out[o] = append(out[o], u)
		}
	}
	return out
}

func enough(m map[string][]string, k int) bool {
	for _, us := range m {
		if len(us) < k {
			return false
		}
	}
	return true
}

// settle sends a mutation until it has an answer that is final, through
// clients in turn from the i-th, with the same request_id: past answers that
// tell nothing of its outcome (aborted, unavailable, internal, an instance
// killed while answering, which Connect may call canceled), as a client is
// told to. It returns nil or the final refusal.
func settle(t *testing.T, clients []pointledgerv1connect.LedgerServiceClient, i int, send func(pointledgerv1connect.LedgerServiceClient) error) error {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; i++ {
		err := send(clients[i%len(clients)])
		if err == nil {
			return nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeAborted, connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown,
			connect.CodeCanceled, connect.CodeDeadlineExceeded: // the client's own context never ends: a reset connection
			if time.Now().After(deadline) {
				t.Errorf("no final answer after 2 minutes: %v", err)
				return err
			}
			continue
		default:
			return err
		}
	}
}

// auditClean checks user's partition with the store's audit (balance the
// fold of the entries, versions gapless, one request record per entry,
// nothing negative, ...) and returns the account.
func auditClean(t *testing.T, p *ledgerdProcess, user string) ledger.Account {
	t.Helper()
	l := dynamo.New(dynamolocal.NewClient(dynamotest.Emulator(t).Endpoint), dynamo.Options{Table: p.prefix + "ledger"})
	a, err := l.Audit(context.Background(), user)
	if err != nil {
		t.Fatalf("audit %s: %v", user, err)
	}
	for _, f := range a.Findings {
		t.Errorf("audit of %s: %s", user, f)
	}
	return a.Account
}

// Three instances that know each other commit each user's mutations at its
// owner, whichever instance the caller reached. Killed mid-run (SIGKILL),
// an owner's calls are committed by the others at once, and once their
// health checks see it gone, its users are theirs; every call gets its one
// answer, and the ledger keeps every invariant.
func TestAffinityCommitsAtTheOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps := startDeployment(t, 3, func(_ int, urls []string) []string {
		// A forward timeout far above any answer on a busy machine: here a
		// call is committed elsewhere only because its owner is gone.
		return []string{"-peers", strings.Join(urls, ","), "-peer-health-interval", "200ms", "-forward-timeout", "1m"}
	})
	waitForPeers(t, 3, 0, ps...)
	urls := []string{"http://" + ps[0].addr, "http://" + ps[1].addr, "http://" + ps[2].addr}
	clients := []pointledgerv1connect.LedgerServiceClient{ps[0].ledgerClient(), ps[1].ledgerClient(), ps[2].ledgerClient()}
	owned := usersOf(urls, 2)
	var users []string
	for _, u := range urls {
		users = append(users, owned[u]...)
	}

	// Every user gets a grant through every instance: each is committed
	// by the user's owner.
	for _, u := range users {
		for i, c := range clients {
			if _, err := c.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: u, Amount: "100", RequestId: fmt.Sprint("g", i)})); err != nil {
				t.Fatalf("grant for %s through %s: %v", u, ps[i].addr, err)
			}
		}
	}
	for i, p := range ps {
		mine := len(owned[urls[i]])
		if got, want := committed(t, p), float64(3*mine); got != want {
			t.Errorf("%s committed %v mutations, want %v: the 3 grants of each of its %d users", p.addr, got, want, mine)
		}
		if got, want := counter(t, p, "pointledger_forwarded_total", "procedure", pointledgerv1connect.LedgerServiceGrantProcedure), float64(len(users)-mine); got != want {
			t.Errorf("%s forwarded %v grants, want %v: those of the users it does not own", p.addr, got, want)
		}
	}

	// Purchases through all three; the third is killed after a third of
	// them. A call that was in flight at it is sent again, with its
	// request_id, through the next instance.
	const purchases = 120
	var next, done atomic.Int64
	var killOnce sync.Once
	bought := make([]atomic.Int64, len(users))
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > purchases {
					return
				}
				k := int(n) % len(users)
				err := settle(t, clients, int(n)+w, func(c pointledgerv1connect.LedgerServiceClient) error {
					_, err := c.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: users[k], Amount: "1", RequestId: fmt.Sprint("p", n)}))
					return err
				})
				if err != nil {
					t.Errorf("purchase %d for %s: %v", n, users[k], err)
					continue
				}
				bought[k].Add(1)
				if done.Add(1) == purchases/3 {
					killOnce.Do(func() { _ = ps[2].cmd.Process.Kill() })
				}
			}
		})
	}
	wg.Wait()
	waitForPeers(t, 2, 1, ps[0], ps[1])
	t.Logf("mutations committed after their owner gave no answer: %v at %s, %v at %s",
		counter(t, ps[0], "pointledger_forward_fallbacks_total", "procedure", pointledgerv1connect.LedgerServicePurchaseProcedure), ps[0].addr,
		counter(t, ps[1], "pointledger_forward_fallbacks_total", "procedure", pointledgerv1connect.LedgerServicePurchaseProcedure), ps[1].addr)

	// The killed instance's users are the others' now, as their view of
	// two peers says.
	before := []float64{committed(t, ps[0]), committed(t, ps[1])}
	want := make([]float64, 2)
	for _, u := range owned[urls[2]] {
		heir := affinity.Owner(u, urls[:2])
		for i, c := range clients[:2] {
			if _, err := c.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: u, Amount: "1", RequestId: fmt.Sprint("after", i)})); err != nil {
				t.Fatalf("grant for %s through %s, its owner killed: %v", u, ps[i].addr, err)
			}
			if heir == urls[0] {
				want[0]++
			} else {
				want[1]++
			}
		}
	}
	for i := range 2 {
		if got := committed(t, ps[i]) - before[i]; got != want[i] {
			t.Errorf("%s committed %v of the killed instance's users' grants, want %v", ps[i].addr, got, want[i])
		}
	}

	// Every purchase was answered once and applied once; the ledger agrees.
	for k, u := range users {
		a := auditClean(t, ps[0], u)
		grants := int64(3)
		credit := decimal.NewFromInt(300)
		if heirs := owned[urls[2]]; heirs[0] == u || heirs[1] == u {
			grants, credit = 5, decimal.NewFromInt(302)
		}
		if b := bought[k].Load(); a.Version != grants+b || !a.Balance.Equal(credit.Sub(decimal.NewFromInt(b))) {
			t.Errorf("%s: version %d, balance %s; want %d entries and %s: %d grants, %d purchases answered", u, a.Version, a.Balance,
				grants+b, credit.Sub(decimal.NewFromInt(b)), grants, b)
		}
	}
}

// Two instances that both believe they own a user (one knows both, the
// other only itself: a split view of the peers) commit its purchases
// side by side, racing; the conditions of the write path keep every
// invariant: exactly as many purchases succeed as the balance pays for,
// and the ledger's audit is clean. A user the first believes the
// second's is forwarded there.
func TestAffinitySplitViewKeepsInvariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps := startDeployment(t, 2, func(i int, urls []string) []string {
		peers := urls[1] // the second knows only itself
		if i == 0 {
			peers = strings.Join(urls, ",")
		}
		return []string{"-peers", peers, "-self", urls[i], "-peer-health-interval", "200ms", "-forward-timeout", "1m"}
	})
	waitForPeers(t, 2, 0, ps[0])
	waitForPeers(t, 1, 0, ps[1])
	urls := []string{"http://" + ps[0].addr, "http://" + ps[1].addr}
	owned := usersOf(urls, 1)
	shared, second := owned[urls[0]][0], owned[urls[1]][0] // shared: each instance believes it owns it
	clients := []pointledgerv1connect.LedgerServiceClient{ps[0].ledgerClient(), ps[1].ledgerClient()}
	for _, u := range []string{shared, second} {
		if _, err := clients[0].Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: u, Amount: "500", RequestId: "g"})); err != nil {
			t.Fatal(err)
		}
	}

	// 40 purchases of 20 from 500 for each user, half through each
	// instance, 8 at a time.
	const buyers = 40
	type count struct{ ok, refused atomic.Int64 }
	counts := map[string]*count{shared: {}, second: {}}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= 2*buyers {
					return
				}
				u := []string{shared, second}[n%2]
				err := settle(t, clients[n/2%2:n/2%2+1], 0, func(c pointledgerv1connect.LedgerServiceClient) error {
					_, err := c.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: u, Amount: "20", RequestId: fmt.Sprint("p", n)}))
					return err
				})
				switch {
				case err == nil:
					counts[u].ok.Add(1)
				case connect.CodeOf(err) == connect.CodeFailedPrecondition: // the balance: the account is active
					counts[u].refused.Add(1)
				default:
					t.Errorf("purchase %d for %s: %v", n, u, err)
				}
			}
		})
	}
	wg.Wait()
	for _, u := range []string{shared, second} {
		if ok, refused := counts[u].ok.Load(), counts[u].refused.Load(); ok != 25 || refused != buyers-25 {
			t.Errorf("%s: %d purchases of 20 from 500 succeeded and %d were refused, want 25 and %d", u, ok, refused, buyers-25)
		}
		if a := auditClean(t, ps[0], u); !a.Balance.IsZero() || a.Version != 26 {
			t.Errorf("%s: balance %s, version %d; want 0 and 26 (the grant and 25 purchases)", u, a.Balance, a.Version)
		}
	}
	t.Logf("write-path retries (the account moved under a group): %v at the first, %v at the second",
		counter(t, ps[0], "pointledger_write_retries_total", "reason", dynamo.RetryVersionMoved),
		counter(t, ps[1], "pointledger_write_retries_total", "reason", dynamo.RetryVersionMoved))
	// Both committed the shared user's purchases, each those it was sent;
	// the second user's all went to the second instance.
	if got, want := committed(t, ps[0]), float64(1+buyers/2); got != want {
		t.Errorf("%s committed %v mutations, want %v: the shared user's grant and the purchases sent to it", ps[0].addr, got, want)
	}
	if got, want := committed(t, ps[1]), float64(1+buyers+buyers/2); got != want {
		t.Errorf("%s committed %v mutations, want %v: all of the second user's, and the shared user's purchases sent to it", ps[1].addr, got, want)
	}
}

// Settings that could not work stop serve before it asks DynamoDB
// anything, and say which setting.
func TestAffinitySettingsThatCannotWork(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	dir := t.TempDir()
	authFile := filepath.Join(dir, "credentials.json")
	tokenFile := filepath.Join(dir, "peer.token")
	for name, b := range map[string][]byte{authFile: creds.Credentials.JSON(), tokenFile: []byte(creds.PeerToken + "\n")} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dynamodb, dials := dialCounter(t)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no peer token", []string{"-peers", "http://a:8080"}, nil, "LEDGER_PEER_TOKEN"},
		{"a service token as the peer token", []string{"-peers", "http://a:8080"}, map[string]string{"LEDGER_PEER_TOKEN": creds.ServiceToken}, "not a peer's"},
		{"the peer token twice", []string{"-peers", "http://a:8080", "-peer-token-file", tokenFile}, map[string]string{"LEDGER_PEER_TOKEN": creds.PeerToken}, "not both"},
		{"https", []string{"-peers", "https://a:8443", "-peer-token-file", tokenFile}, nil, "want http://host:port"},
		{"self elsewhere", []string{"-peers", "http://a:8080,http://b:8080", "-self", "http://c:8080", "-peer-token-file", tokenFile}, nil, "not among -peers"},
		{"self without peers", []string{"-self", "http://a:8080"}, nil, "goes with -peers"},
		{"no forward timeout", []string{"-peers", "dns:ledgerd:8080", "-forward-timeout", "0s", "-peer-token-file", tokenFile}, nil, "-forward-timeout"},
	} {
		args := append([]string{"serve", "-auth-file", authFile, "-listen", "127.0.0.1:0", "-ops-listen", "off", "-dynamodb-endpoint", "http://" + dynamodb}, tc.args...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // should it serve, it stops and the test fails
		var out, errOut strings.Builder
		err := run(ctx, args, func(name string) string { return tc.env[name] }, &out, &errOut)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if n := dials.Load(); n > 0 {
		t.Errorf("serve with settings that cannot work connected to DynamoDB %d times, want none", n)
	}
}
