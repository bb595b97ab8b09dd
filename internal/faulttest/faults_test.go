// Package faulttest runs the real ledgerd binary through faults, against
// DynamoDB Local, and checks afterwards that no point was lost or repeated.
// Run it with `make test-faults` (also in .ci/run).
package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/migrations"
)

// sent is one request as its client saw it, after all its retries.
type sent struct {
	user, id string
	typ      ledger.EntryType // GRANT, PURCHASE, HOLD (Authorize), CAPTURE or RELEASE (Void)
	amount   decimal.Decimal  // zero for a void, and a capture of all of its hold
	ttl      time.Duration    // grants: expiring after this (0: never); holds: their ttl
	hold     string           // captures and voids: the request_id of the hold
	acked    bool
	entryID  string // "" for an authorization, whose answer is its hold
	last     string // the last answer's code
}

// call sends s once and returns the entry its answer names (none for an
// authorization).
func call(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, s *sent) (*pb.Entry, error) {
	switch s.typ {
	case ledger.EntryGrant:
		r := &pb.GrantRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id}
		if s.ttl > 0 {
			r.Ttl = durationpb.New(s.ttl) // the same ttl on every retry: the same request
		}
		res, err := client.Grant(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return res.Msg.Entry, nil
	case ledger.EntryHold:
		_, err := client.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id, Ttl: durationpb.New(s.ttl)}))
		return nil, err
	case ledger.EntryCapture:
		r := &pb.CaptureRequest{UserId: s.user, RequestId: s.id, HoldRequestId: s.hold}
		if !s.amount.IsZero() {
			r.Amount = s.amount.String()
		}
		res, err := client.Capture(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return res.Msg.Entry, nil
	case ledger.EntryRelease:
		res, err := client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: s.user, RequestId: s.id, HoldRequestId: s.hold}))
		if err != nil {
			return nil, err
		}
		return res.Msg.Entry, nil
	case ledger.EntryPurchase:
		res, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: s.user, Amount: s.amount.String(), RequestId: s.id}))
		if err != nil {
			return nil, err
		}
		return res.Msg.Entry, nil
	case ledger.EntryRefund, ledger.EntryAdjustment, ledger.EntryExpiration:
	}
	return nil, fmt.Errorf("the load sends no %s", s.typ)
}

// next is a worker's next request: mostly purchases, some grants (half of
// them expiring, some within the run), authorizations (whose ttls end
// within the run, so that some holds expire), and captures (of all of the
// hold or part of it) and voids of the worker's acknowledged holds.
func next(rng *rand.Rand, users []string, holds *[]*sent, id string) *sent {
	s := &sent{user: users[rng.IntN(len(users))], typ: ledger.EntryPurchase, id: id, amount: decimal.NewFromInt(int64(1 + rng.IntN(3)))}
	switch k := rng.IntN(20); {
	case k < 4:
		s.typ, s.amount = ledger.EntryGrant, decimal.NewFromInt(20)
		if rng.IntN(2) == 0 {
			s.ttl = time.Duration(2+rng.IntN(30)) * time.Second
		}
	case k < 7:
		s.typ, s.ttl = ledger.EntryHold, time.Duration(2+rng.IntN(20))*time.Second
	case k < 10 && len(*holds) > 0:
		i := rng.IntN(len(*holds))
		h := (*holds)[i]
		*holds = slices.Delete(*holds, i, i+1)
		s.user, s.hold, s.typ, s.amount = h.user, h.id, ledger.EntryCapture, decimal.Zero // zero: all of it, by naming no amount
		switch rng.IntN(4) {
		case 0:
			s.typ = ledger.EntryRelease
		case 1:
		case 2:
			s.amount = h.amount
		default:
			s.amount = decimal.Max(decimal.NewFromInt(1), h.amount.Sub(decimal.NewFromInt(1)))
		}
	}
	return s
}

// TestNoPointLostOrRepeatedThroughFaults: clients buy and grant, and
// authorize, capture and void holds, on a few users through ledgerd, which talks to DynamoDB Local through a proxy that
// injects latency spikes, closed connections, and transactions carried out
// whose answers are lost or late. Meanwhile ledgerd and the projector (its
// own process, `ledgerd project`, killed while it applies the load's
// records) are each killed with SIGKILL and restarted three times, and the
// emulator, persisting with -dbPath, is stopped under load and restarted. Clients retry whatever has no
// definite answer with the same request id, as a client of a ledger must.
// After quiescence: reconciliation is clean (aggregate = fold, no negative
// balance, holds and their records agree, history = ledger, sums), every
// acknowledged request is exactly one entry, every other at most one, and
// no entry is unaccounted for; what is held is the sum of the open holds;
// every hold made has its record, and every capture or void applied
// resolved its hold, by its own entry, for what it says.
func TestNoPointLostOrRepeatedThroughFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults")
	}
	ctx := context.Background()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ledgerd")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "ledgerd")).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// DynamoDB Local persisting to disk, and the fault proxy before it.
	dbPath := t.TempDir()
	emu, err := dynamolocal.Start(ctx, dynamolocal.Options{DBPath: dbPath, JVMFlags: dynamolocal.TestJVMFlags})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { emu.Stop() }()
	proxy, err := ddbproxy.Start(ddbproxy.Options{Target: emu.Endpoint, Latency: time.Millisecond, Faults: ddbproxy.Faults{
		Seed: uint64(time.Now().UnixNano()), Spike: 0.05, SpikeMax: 300 * time.Millisecond, Reset: 0.02,
		LoseAnswer: 0.05, LateAnswer: 0.05, LateBy: 1500 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	creds := auth.GenerateDev()
	// Operations listeners on any free port: the defaults may be held by
	// another ledgerd on this machine.
	base := append(os.Environ(), "LEDGER_LOG_LEVEL=warn", "LEDGER_LEASE_TTL=3s", "LEDGER_OPS_LISTEN=127.0.0.1:0",
		"LEDGER_AUTH_FILE=", "LEDGER_AUTH_JSON="+string(creds.Credentials.JSON()))
	migrate := exec.Command(bin, "migrate")
	migrate.Env = append(base, "LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}

	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	logs := &dynamolocal.Output{}
	env := append(base, "LEDGER_DYNAMODB_ENDPOINT="+proxy.URL)
	// ledgerd serves without its projector; the projector runs as its own
	// process (`ledgerd project`), so that each can be killed on its own.
	ledgerd := &process{bin: bin, env: append(env, "LEDGER_PROJECTOR=false"), out: logs,
		args: []string{"serve", "-listen", fmt.Sprintf("127.0.0.1:%d", port)}}
	projector := &process{bin: bin, env: env, out: logs, args: []string{"project"}}
	ledgerd.start(t)
	defer ledgerd.kill()
	projector.start(t)
	defer projector.kill()

	// The clients.
	client := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, url, connect.WithInterceptors(auth.Bearer(creds.ServiceToken)))
	users := []string{"u0", "u1", "u2", "u3", "u4"}
	var mu sync.Mutex
	var book []*sent
	var attempts, retries, ackedSoFar atomic.Int64
	do := func(s *sent) {
		for attempt := range 200 {
			attempts.Add(1)
			if attempt > 0 {
				retries.Add(1)
				time.Sleep(time.Duration(min(attempt, 10)) * 50 * time.Millisecond)
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			e, err := call(rctx, client, s)
			cancel()
			s.last = connect.CodeOf(err).String()
			if err == nil {
				s.acked, s.last = true, "ok"
				if e != nil {
					s.entryID = e.EntryId
				}
				ackedSoFar.Add(1)
				return
			}
			switch connect.CodeOf(err) {
			case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodeInvalidArgument:
				return // a definite answer: refused, nothing written
			default:
			}
			// No definite answer (ledgerd down, DynamoDB down, deadline):
			// the same request again, as long as it takes.
		}
	}
	runCtx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var holds []*sent // this worker's acknowledged holds, not yet captured or voided
			for n := 0; runCtx.Err() == nil; n++ {
				s := next(rng, users, &holds, fmt.Sprintf("w%d-%d", w, n))
				mu.Lock()
				book = append(book, s)
				mu.Unlock()
				do(s)
				if s.typ == ledger.EntryHold && s.acked {
					holds = append(holds, s)
				}
			}
		})
	}

	// The faults over time.
	step := func(d time.Duration, what string, f func()) {
		time.Sleep(d)
		t.Logf("%s", what)
		f()
	}
	kills, projectorKills, emulatorRestarts := 0, 0, 0
	for i := range 3 {
		step(3*time.Second, "SIGKILL the projector (mid-batch: the load goes on)", func() { projector.kill(); projectorKills++ })
		step(500*time.Millisecond, "restart the projector", func() { projector.start(t) })
		step(3*time.Second, "SIGKILL ledgerd", func() { ledgerd.kill(); kills++ })
		step(time.Second, "restart ledgerd", func() { ledgerd.start(t) })
		if i == 1 {
			// SIGTERM: killed with SIGKILL, DynamoDB Local loses its last
			// acknowledged write (see dynamolocal.Shutdown), which the real
			// service never does, so that is not a fault to test here.
			step(4*time.Second, "stop DynamoDB Local (SIGTERM) under load", func() { emu.Shutdown() })
			step(2*time.Second, "restart DynamoDB Local on its -dbPath", func() {
				if emu, err = dynamolocal.Start(ctx, dynamolocal.Options{DBPath: dbPath, Port: emu.Port, JVMFlags: dynamolocal.TestJVMFlags}); err != nil {
					t.Fatal(err)
				}
				emulatorRestarts++
			})
		}
	}
	time.Sleep(6 * time.Second)
	// The load goes on until enough requests were acknowledged for the
	// checks to mean something, however slow a busy machine makes them (a
	// bound on a hang, not on speed).
	for deadline := time.Now().Add(5 * time.Minute); ackedSoFar.Load() < minAcked && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	stopClients()
	wg.Wait() // every request has its definite answer, or gave up after 200 tries

	// Quiescence: the projection catches up, then reconciliation.
	db := dynamolocal.NewClient(emu.Endpoint)
	store := dynamo.New(db, dynamo.Options{Table: migrations.LedgerTable})
	reportFile := filepath.Join(t.TempDir(), "reconcile.json")
	rec := exec.Command(bin, "reconcile", "-json", reportFile, "-projection-grace", "5m") // ends once caught up
	rec.Env = append(base, "LEDGER_DYNAMODB_ENDPOINT="+emu.Endpoint)
	recOut, err := rec.CombinedOutput()
	out, _ := os.ReadFile(reportFile)
	var report struct {
		Clean    bool              `json:"clean"`
		Findings []json.RawMessage `json:"findings"`
		Entries  int64             `json:"entries_checked"`
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil || err != nil || !report.Clean {
		t.Errorf("reconcile: %v, %v: %s\n%s", err, jerr, out, recOut)
	}

	// The book against the ledger.
	byID := map[string]ledger.Entry{}
	counts := map[string]int{}
	holds := map[string]ledger.Hold{} // every hold, by user/request_id
	expirations := 0
	var violations int
	violate := func(format string, args ...any) {
		violations++
		t.Errorf(format, args...)
	}
	for _, u := range users {
		entries, err := store.EntriesAfter(ctx, u, 0, math.MaxInt) // all of them
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.System() {
				expirations++ // the ledger's own (expirations, releases of expired holds): no request made it
				continue
			}
			byID[u+"/"+e.RequestID] = e
			counts[u+"/"+e.RequestID]++
		}
		all := ledger.HoldQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize}, States: []ledger.HoldState{ledger.HoldHeld, ledger.HoldCaptured, ledger.HoldVoided, ledger.HoldExpired}}
		for {
			hs, next, err := store.Holds(ctx, u, all)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				holds[u+"/"+h.RequestID] = h
			}
			if all.PageToken = next; next == "" {
				break
			}
		}
		// What is held is the sum of the open holds, as the fold of the
		// entries has them (reconciliation checked it too, with the records).
		acct, err := store.Balance(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		folded, _, err := ledger.Fold(u, entries)
		if err != nil {
			t.Fatal(err)
		}
		sum := decimal.Zero
		for _, h := range acct.Holds {
			sum = sum.Add(h.Amount)
		}
		if !acct.Held.Equal(sum) || !acct.Held.Equal(folded.Held) || len(acct.Holds) != len(folded.Holds) || acct.Available().IsNegative() {
			violate("%s: held %s, its %d open holds sum to %s, the fold holds %s in %d", u, acct.Held, len(acct.Holds), sum, folded.Held, len(folded.Holds))
		}
	}
	var acked, unacked, unknown int
	ackedByType := map[ledger.EntryType]int{}
	for _, s := range book {
		k := s.user + "/" + s.id
		n := counts[k]
		delete(counts, k)
		switch {
		case s.acked:
			acked++
			ackedByType[s.typ]++
			if n != 1 || (s.entryID != "" && byID[k].ID != s.entryID) {
				violate("acknowledged %s %s: %d entries (entry %s, acknowledged %s)", s.typ, k, n, byID[k].ID, s.entryID)
			}
		default:
			unacked++
			if s.last != "failed_precondition" && s.last != "not_found" && s.last != "already_exists" {
				unknown++ // gave up without a definite answer
			}
			if n > 1 {
				violate("unacknowledged %s %s (%s): %d entries", s.typ, k, s.last, n)
			}
		}
		if n == 1 && byID[k].Type != s.typ {
			violate("%s: a %s, its entry a %s", k, s.typ, byID[k].Type)
		}
		// A hold made has its record; a capture or a void applied resolved
		// its hold, by that entry, once and for what it says.
		switch e := byID[k]; {
		case n != 1:
		case s.typ == ledger.EntryHold:
			if h, ok := holds[k]; !ok || h.Version != e.Version || !h.Amount.Equal(s.amount) {
				violate("hold %s (entry %d of %s): its record is %+v", k, e.Version, s.amount, h)
			}
		case s.typ == ledger.EntryCapture || s.typ == ledger.EntryRelease:
			h := holds[s.user+"/"+s.hold]
			captured := s.amount
			if captured.IsZero() {
				captured = h.Amount
			}
			if h.ResolveVersion != e.Version || (s.typ == ledger.EntryCapture && (h.State != ledger.HoldCaptured || !h.CapturedAmount.Equal(captured))) ||
				(s.typ == ledger.EntryRelease && h.State != ledger.HoldVoided) {
				violate("%s %s of hold %s (entry %d): the hold's record is %+v", s.typ, k, s.hold, e.Version, h)
			}
		}
	}
	for k := range counts {
		violate("entry of request %s, which no client sent", k)
	}
	st := proxy.Stats()
	if st.Faults.Total() == 0 || st.Faults.LostAnswers == 0 || kills != 3 || projectorKills != 3 || emulatorRestarts != 1 {
		t.Errorf("the faults did not happen: %+v, %d kills of ledgerd, %d of the projector, %d emulator restarts", st.Faults, kills, projectorKills, emulatorRestarts)
	}
	if acked < minAcked || ackedByType[ledger.EntryHold] == 0 || ackedByType[ledger.EntryCapture] == 0 {
		t.Errorf("only %d requests acknowledged (%v): the test proves little", acked, ackedByType)
	}
	t.Logf("%d requests (%d attempts, %d retries): %d acknowledged (%v), %d refused or unanswered (%d without a definite answer); "+
		"faults: %d spikes, %d resets, %d lost answers, %d late answers; %d SIGKILLs of ledgerd, %d of the projector, %d emulator restarts; "+
		"%d entries reconciled (%d the ledger's own: expirations, releases of expired holds); %d holds; %d violations",
		len(book), attempts.Load(), retries.Load(), acked, ackedByType, unacked, unknown,
		st.Faults.Spikes, st.Faults.Resets, st.Faults.LostAnswers, st.Faults.LateAnswers, kills, projectorKills, emulatorRestarts,
		report.Entries, expirations, len(holds), violations)
	if t.Failed() {
		t.Logf("ledgerd's logs:\n%s", logs.String())
	}
}

// minAcked is how many acknowledged requests make the fault test prove
// something.
const minAcked = 100

// process is a ledgerd command that the test kills and starts again.
type process struct {
	bin  string
	args []string
	env  []string
	out  *dynamolocal.Output
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func (p *process) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = p.env, p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// kill kills it with SIGKILL: no shutdown, no last checkpoint.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}
