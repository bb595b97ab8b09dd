package stack

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// stubExec answers every call with answer, and counts them.
type stubExec struct {
	mu     sync.Mutex
	answer drive.Outcome
	calls  int
}

func (s *stubExec) Do(context.Context, drive.Op) drive.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.answer
}

func (s *stubExec) set(answer drive.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = answer
}

func stubBalancer(n int) (*Balancer, []*stubExec) {
	var targets []*target
	var stubs []*stubExec
	for i := range n {
		s := &stubExec{answer: drive.Outcome{Code: "ok"}}
		stubs = append(stubs, s)
		targets = append(targets, &target{inst: &Instance{Name: "ledgerd-" + string(rune('1'+i))}, x: s})
	}
	return newBalancer(targets, time.Second), stubs
}

func purchase(user string) drive.Op {
	return drive.Op{Kind: "purchase", User: user, RequestID: "r", Amount: decimal.NewFromInt(1)}
}

func TestTheBalancerSendsEachCallToTheNextInstance(t *testing.T) {
	t.Parallel()
	b, stubs := stubBalancer(3)
	for range 9 {
		b.Do(context.Background(), purchase("u"))
	}
	for i, s := range stubs {
		if s.calls != 3 {
			t.Errorf("instance %d got %d calls of 9, want 3", i+1, s.calls)
		}
	}
	counts := b.counts()
	if counts[0].Calls != 3 || counts[0].Purchases != 3 || counts[0].Codes["ok"] != 3 {
		t.Errorf("counts of instance 1 = %+v, want 3 calls, 3 purchases, ok=3", counts[0])
	}
}

// A dead instance refuses connections: after passiveFails of them in a
// row the balancer stops sending it calls, and the others get them all.
func TestTheBalancerTakesOutAnInstanceItCannotReach(t *testing.T) {
	t.Parallel()
	b, stubs := stubBalancer(3)
	stubs[1].set(drive.Outcome{Code: "unavailable", Unreachable: true})
	for range 3 * passiveFails {
		b.Do(context.Background(), purchase("u"))
	}
	if stubs[1].calls != passiveFails {
		t.Fatalf("the dead instance got %d calls, want %d (then taken out)", stubs[1].calls, passiveFails)
	}
	for range 10 {
		if out := b.Do(context.Background(), purchase("u")); out.Code != "ok" {
			t.Fatalf("a call after the dead instance was taken out: %s, want ok", out.Code)
		}
	}
	if stubs[1].calls != passiveFails {
		t.Errorf("the dead instance got %d calls after it was taken out", stubs[1].calls-passiveFails)
	}
	if got := b.counts()[1].Unreachable; got != passiveFails {
		t.Errorf("unreachable calls counted: %d, want %d", got, passiveFails)
	}
}

// An answer that is an error (a refusal, a conflict) is the ledger's: it
// does not count against the instance.
func TestAnErrorAnswerDoesNotTakeAnInstanceOut(t *testing.T) {
	t.Parallel()
	b, stubs := stubBalancer(2)
	stubs[0].set(drive.Outcome{Code: "aborted"})
	for range 4 * passiveFails {
		b.Do(context.Background(), purchase("u"))
	}
	if stubs[0].calls != 2*passiveFails {
		t.Errorf("the instance answering aborted got %d calls, want %d", stubs[0].calls, 2*passiveFails)
	}
}

func TestHealthChecksTakeAnInstanceOutAndPutItBack(t *testing.T) {
	t.Parallel()
	b, _ := stubBalancer(2)
	tg := b.targets[0]
	down := errors.New("connection refused")
	tg.checked(down)
	if !tg.inService() {
		t.Fatal("out after one failed health check, want healthFails in a row")
	}
	tg.checked(down)
	if tg.inService() {
		t.Fatalf("in service after %d failed health checks", healthFails)
	}
	for range 10 {
		b.Do(context.Background(), purchase("u"))
	}
	if n := b.counts()[0].Calls; n != 0 {
		t.Errorf("the instance out of service got %d calls", n)
	}
	tg.checked(nil)
	if tg.inService() {
		t.Fatal("back after one passed health check, want healthPasses in a row")
	}
	tg.checked(nil)
	if !tg.inService() {
		t.Fatalf("still out after %d passed health checks", healthPasses)
	}
	b.targets[1].checked(down)
	b.targets[1].checked(down)
	tg.checked(down)
	tg.checked(down)
	if out := b.Do(context.Background(), purchase("u")); out.Code != codeNoInstance || !out.Unreachable {
		t.Errorf("a call with every instance out: %+v, want %s", out, codeNoInstance)
	}
}

// Watch asks each instance's /healthz: a server that stops answering is
// taken out within healthFails intervals.
func TestWatchChecksEveryInstance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	}))
	defer srv.Close()
	b := newBalancer([]*target{{inst: &Instance{Name: "ledgerd-1", URL: srv.URL}, x: &stubExec{}}}, 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Watch(ctx, srv.Client())
	time.Sleep(100 * time.Millisecond)
	if !b.targets[0].inService() {
		t.Fatal("a healthy instance was taken out")
	}
	mu.Lock()
	status = http.StatusServiceUnavailable
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for b.targets[0].inService() {
		if time.Now().After(deadline) {
			t.Fatal("an instance answering 503 was not taken out")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if by := b.targets[0].outBy; !strings.Contains(by, "health checks") {
		t.Errorf("taken out by %q, want the health checks", by)
	}
}

// After a kill, a mutation that fails for want of an instance within the
// window is expected; one sent after the window is a violation.
func TestFailoverReportsWhatFailedAfterTheWindow(t *testing.T) {
	t.Parallel()
	b, _ := stubBalancer(2)
	kill := time.Now()
	window := time.Second
	b.killed(kill, window)
	dead := drive.Outcome{Code: "unavailable", Unreachable: true}
	ok := drive.Outcome{Code: "ok"}
	b.follow(purchase("alice"), "i1", kill.Add(-time.Millisecond), dead) // before the kill: not followed
	b.follow(purchase("alice"), "i1", kill.Add(100*time.Millisecond), dead)
	b.follow(purchase("alice"), "i1", kill.Add(2*time.Second), ok)
	b.follow(purchase("bob"), "i1", kill.Add(2*time.Second), drive.Outcome{Code: "failed_precondition"}) // the ledger's answer: served
	b.follow(drive.Op{Kind: "balance", User: "carol"}, "i1", kill.Add(3*time.Second), dead)              // not a mutation
	k := b.failover(b.targets[0], 0, kill)
	if k.Users != 2 || k.ServedLater != 2 || len(k.Late) != 0 || k.LastFailureMS != 100 {
		t.Fatalf("failover = %+v, want 2 users, 2 served later, none late, last failure at 100 ms", k)
	}
	b.follow(purchase("bob"), "i1", kill.Add(1500*time.Millisecond), drive.Outcome{Code: "unavailable", Err: "no owner"}) // a live instance that could not forward
	k = b.failover(b.targets[0], 0, kill)
	if len(k.Late) != 1 || !strings.HasPrefix(k.Late[0], "bob: 1 mutations sent more than 1s after the kill failed") || !strings.HasSuffix(k.Late[0], "i1 answered unavailable (no owner)") {
		t.Errorf("late = %q, want bob's", k.Late)
	}
	var inv report.Invariants
	inv.AddFailover(k)
	if inv.OK() {
		t.Error("a late failure is no violation")
	}
}

// Calls picked at the same time each find the instance in service: a pick
// looks at every instance once from its turn, whatever the other picks take
// meanwhile. (A pick that advanced the shared turn for each instance it
// looked at could be sent back to the dead one by another's pick, and find
// none: a kill test saw one such call, no_instance beside a live survivor.)
func TestConcurrentPicksAlwaysFindTheInstanceInService(t *testing.T) {
	t.Parallel()
	b, _ := stubBalancer(2)
	b.targets[0].mu.Lock()
	b.targets[0].takeOut("killed")
	b.targets[0].mu.Unlock()
	var none sync.Map
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for range 20000 {
				if b.pick() == nil {
					none.Store(w, true)
					return
				}
			}
		})
	}
	wg.Wait()
	none.Range(func(w, _ any) bool {
		t.Errorf("worker %d found no instance in service, with %s in service", w, b.targets[1].inst.Name)
		return true
	})
}
