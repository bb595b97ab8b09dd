package dispatchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/webhook"
)

var quiet = slog.New(slog.DiscardHandler)

// testSchedule retries within milliseconds: the tests wait for what
// happens, never for how long it takes.
var testSchedule = webhook.Schedule{Delays: []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}}

// Env is what a case runs on: a store of the dispatcher's and a ledger,
// both new and on the clock the case gives, and the store's own ways to
// make what its backend alone makes happen.
type Env struct {
	// Store keeps the endpoints and the dispatchers' queues and rows:
	// every dispatcher of a case, and the endpoints it makes, share it.
	Store dispatch.Store
	// Ledger is where the case writes entries, which the dispatchers read.
	Ledger ledger.Store
	// Crash leaves the queue of ref claimed by owner until until, as a
	// dispatcher that died holding it leaves it.
	Crash func(ref dispatch.QueueRef, owner string, until time.Time) error
	// Throttled, if the backend can throttle, is a store over the same
	// data whose first n queue writes the backend refuses as over its
	// capacity, and the count of those refused; nil skips the case.
	Throttled func(n int64) (store dispatch.Store, throttled func() int64)
	// NoticePass, if ledgerd's notice finder runs on this backend, makes
	// one pass of it over Ledger on now, handing each notice to notify;
	// nil leaves the notice out of the case that needs one.
	NoticePass func(ctx context.Context, now func() time.Time, notify func(context.Context, webhook.Event) error) error
}

// NewEnv makes a new Env whose stores tell the time by now.
type NewEnv func(t *testing.T, now func() time.Time) Env

// fixture is a ledger and a dispatcher's store, a clock the ledger and the
// endpoints share (expirations are decided by it), and the dispatchers a
// test runs.
type fixture struct {
	t         *testing.T
	env       Env
	clk       *ledgertest.Clock
	store     ledger.Store
	endpoints dispatch.EndpointStore
}

func newFixture(t *testing.T, newEnv NewEnv) *fixture {
	t.Helper()
	clk := ledgertest.NewClock(time.Now().UTC())
	env := newEnv(t, clk.Now)
	return &fixture{t: t, env: env, clk: clk, store: env.Ledger, endpoints: env.Store}
}

// testEntryJSON stands for api.EntryJSON (which the dispatcher is given in
// ledgerd): enough of the entry to check what a receiver gets.
func testEntryJSON(e ledger.Entry) (json.RawMessage, error) {
	return json.Marshal(map[string]any{
		"entry_id": e.ID, "user_id": e.UserID, "version": strconv.FormatInt(e.Version, 10), "type": e.Type,
		"amount": e.Amount.String(), "create_time": webhook.FormatTimestamp(e.CreateTime),
	})
}

// dispatcher starts a dispatcher with the test schedule (o may change it),
// runs it until the test ends, and returns it.
func (f *fixture) dispatcher(o dispatch.Options) *dispatch.Dispatcher {
	f.t.Helper()
	return f.dispatcherOn(f.env.Store, o)
}

// dispatcherOn is dispatcher on store (one with faults of its backend).
func (f *fixture) dispatcherOn(store dispatch.Store, o dispatch.Options) *dispatch.Dispatcher {
	f.t.Helper()
	if o.Sender == nil {
		o.Sender = sender(10 * time.Second)
	}
	if o.EncodeEntry == nil {
		o.EncodeEntry = testEntryJSON
	}
	if o.Schedule.Delays == nil {
		o.Schedule = testSchedule
	}
	if o.PollInterval == 0 {
		o.PollInterval = 20 * time.Millisecond
	}
	if o.EndpointRefresh == 0 {
		o.EndpointRefresh = 50 * time.Millisecond
	}
	o.Log = quiet
	if os.Getenv("DISPATCH_LOG") != "" {
		o.Log = slog.Default()
	}
	d, err := dispatch.New(store, f.store, o)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	})
	return d
}

// apply makes a mutation of user, which must succeed.
func (f *fixture) apply(typ ledger.EntryType, r ledger.Request) ledger.Result {
	f.t.Helper()
	m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := f.store.Apply(context.Background(), m)
	if err != nil {
		f.t.Fatalf("%s %+v: %v", typ, r, err)
	}
	return res
}

// entries reads every entry of users from the ledger.
func (f *fixture) entries(users ...string) []ledger.Entry {
	f.t.Helper()
	var all []ledger.Entry
	for _, u := range users {
		es, err := f.store.EntriesAfter(context.Background(), u, 0, 1<<30)
		if err != nil {
			f.t.Fatal(err)
		}
		all = append(all, es...)
	}
	return all
}

// feed hands entries to each dispatcher as the stream would: in batches
// of mixed users, in version order per user.
func (f *fixture) feed(entries []ledger.Entry, ds ...*dispatch.Dispatcher) {
	f.t.Helper()
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b ledger.Entry) int { return a.CreateTime.Compare(b.CreateTime) })
	const batch = 25
	for i := 0; i < len(sorted); i += batch {
		for _, d := range ds {
			if err := d.Apply(context.Background(), sorted[i:min(i+batch, len(sorted))]); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// endpoint creates an endpoint for rcv and gives rcv its secret.
func (f *fixture) endpoint(rcv *receiver, types ...string) dispatch.Endpoint {
	f.t.Helper()
	if len(types) == 0 {
		types = []string{"*"}
	}
	e, secret, err := f.endpoints.Create(context.Background(), dispatch.Endpoint{URL: rcv.url(), EventTypes: types})
	if err != nil {
		f.t.Fatal(err)
	}
	rcv.mu.Lock()
	rcv.secrets = append(rcv.secrets, secret)
	rcv.mu.Unlock()
	return e
}

// observed records what a dispatcher's Observer is told.
type observed struct {
	mu         sync.Mutex
	dispatched int
	attempts   map[dispatch.Outcome]int
	lags       int
	again      int              // redeliveries' 2xx
	depth      map[string]int64 // by endpoint: the last report
}

func (o *observed) observer() dispatch.Observer {
	o.attempts, o.depth = map[dispatch.Outcome]int{}, map[string]int64{}
	return dispatch.Observer{
		EventsDispatched: func(_ string, n int) { o.mu.Lock(); o.dispatched += n; o.mu.Unlock() },
		Attempted:        func(_ string, out dispatch.Outcome) { o.mu.Lock(); o.attempts[out]++; o.mu.Unlock() },
		Delivered:        func(string, time.Duration) { o.mu.Lock(); o.lags++; o.mu.Unlock() },
		Redelivered:      func(string) { o.mu.Lock(); o.again++; o.mu.Unlock() },
		QueueDepth:       func(ep string, n int64) { o.mu.Lock(); o.depth[ep] = n; o.mu.Unlock() },
	}
}

// sender sends to receivers on 127.0.0.1, each attempt ending at timeout.
func sender(timeout time.Duration) *webhook.Sender {
	return webhook.NewSender(webhook.Options{
		Policy:  webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true},
		Timeout: timeout,
	})
}

// waitLimit is as long as a busy machine may need for what a test waits for.
var waitLimit = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("DISPATCH_WAIT")); err == nil {
		return d
	}
	return 2 * time.Minute
}()

// waitFor waits until cond holds, up to waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitLimit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled waits until d delivers no queue: every 2xx a receiver got is
// then on the record (a queue's run ends with the write of its last
// group), as ListDeliveries lists it.
func settled(t *testing.T, d *dispatch.Dispatcher) {
	t.Helper()
	waitFor(t, "every queue's last group written", func() bool { return d.Status().InFlight == 0 })
}

// arrival is one request a receiver got.
type arrival struct {
	id      string
	typ     string
	user    string
	version int64
	status  int
}

// receiver is a webhook receiver on 127.0.0.1 that verifies every request
// and records it. answer decides each request's status (nil: 204); a
// status of 0 hangs until the sender gives up (a timeout).
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	secrets []webhook.Secret
	answer  func(n int, a arrival) int
	log     []arrival            // every request, in arrival order
	acked   map[string][]arrival // by user: the first 2xx of each event, in order
	ackedID map[string]bool
	seen    map[string]arrival // by webhook-id: what it carried first
	bad     []string           // what broke the rules
	// inOrder asks every request to be of a version at most one above the
	// user's highest acknowledged: the next event only after the previous
	// one's 2xx (for an endpoint of every type, with nothing given up).
	inOrder bool
	// raw, if set, is given every body that verifies, with its type.
	raw func(typ string, body []byte)
}

func newReceiver(t *testing.T, answer func(n int, a arrival) int) *receiver {
	r := offlineReceiver(t, answer)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// offlineReceiver is a receiver without a server: the test serves it.
func offlineReceiver(t *testing.T, answer func(n int, a arrival) int) *receiver {
	return &receiver{t: t, answer: answer, acked: map[string][]arrival{}, ackedID: map[string]bool{}, seen: map[string]arrival{}}
}

func (r *receiver) url() string { return r.srv.URL + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var msg struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      struct {
			EventID string `json:"event_id"`
			UserID  string `json:"user_id"`
			Version int64  `json:"version,string"`
			Entry   struct {
				EntryID    string `json:"entry_id"`
				Type       string `json:"type"`
				Version    int64  `json:"version,string"`
				CreateTime string `json:"create_time"`
			} `json:"entry"`
		} `json:"data"`
	}
	r.mu.Lock()
	secrets := slices.Clone(r.secrets)
	r.mu.Unlock()
	id := req.Header.Get(webhook.HeaderID)
	a := arrival{id: id}
	var problem string
	switch {
	case webhook.Verify(secrets, req.Header, body, time.Now(), webhook.DefaultTolerance) != nil:
		problem = "signature does not verify for " + id
	case json.Unmarshal(body, &msg) != nil:
		problem = "body is not JSON: " + string(body)
	case msg.Data.EventID != id:
		problem = fmt.Sprintf("webhook-id %s carries event %s", id, msg.Data.EventID)
	case msg.Data.Entry.EntryID != "" && (msg.Data.Entry.EntryID != id || msg.Data.Entry.Version != msg.Data.Version ||
		string(ledger.EventTypeOf(ledger.EntryType(strings.TrimPrefix(msg.Data.Entry.Type, "ENTRY_TYPE_")))) != msg.Type || msg.Data.Entry.CreateTime != msg.Timestamp):
		problem = fmt.Sprintf("event %s: the body's type, version or timestamp is not its entry's: %s", id, body)
	}
	a.typ, a.user, a.version = msg.Type, msg.Data.UserID, msg.Data.Version
	if r.raw != nil && problem == "" {
		r.raw(msg.Type, body)
	}
	r.mu.Lock()
	n := len(r.log) + 1
	r.mu.Unlock()
	status := http.StatusNoContent
	if r.answer != nil {
		status = r.answer(n, a)
	}
	if status == 0 { // hang: the sender's timeout ends the attempt
		<-req.Context().Done()
	}
	a.status = status
	r.mu.Lock()
	defer r.mu.Unlock()
	if first, ok := r.seen[id]; ok && (first.user != a.user || first.version != a.version || first.typ != a.typ) {
		problem = fmt.Sprintf("webhook-id %s came as %+v and now as %+v", id, first, a)
	} else if !ok {
		r.seen[id] = a
	}
	if acked := r.acked[a.user]; r.inOrder && problem == "" && a.version > int64(len(acked))+1 {
		problem = fmt.Sprintf("%s: version %d came before %d was acknowledged", a.user, a.version, len(acked)+1)
	}
	if problem != "" {
		r.bad = append(r.bad, problem)
		status = http.StatusBadRequest
	}
	r.log = append(r.log, a)
	if status >= 200 && status < 300 && !r.ackedID[id] {
		r.ackedID[id] = true
		r.acked[a.user] = append(r.acked[a.user], a)
	}
	if status != 0 {
		w.WriteHeader(status)
	}
}

// ackedVersions returns the versions of user's events as first answered
// 2xx, in arrival order.
func (r *receiver) ackedVersions(user string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, a := range r.acked[user] {
		out = append(out, a.version)
	}
	return out
}

func (r *receiver) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ackedID)
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// check fails the test on any request that broke the rules.
func (r *receiver) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.bad {
		r.t.Error(p)
	}
}

// versions returns 1..n.
func versions(from, to int64) []int64 {
	var out []int64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// secondOfThreeGivenUp: user x's three grants fed to a dispatcher of three
// attempts a millisecond apart, whose receiver answers 503 to version 2
// until healed is set; it returns once versions 1 and 3 are acknowledged
// (version 2 given up, or about to be).
func (f *fixture) secondOfThreeGivenUp(t *testing.T) (healed *atomic.Bool, rcv *receiver, ep dispatch.Endpoint, d *dispatch.Dispatcher) {
	t.Helper()
	healed = new(atomic.Bool)
	rcv = newReceiver(t, func(_ int, a arrival) int {
		if a.version == 2 && !healed.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ep = f.endpoint(rcv)
	d = f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Millisecond, time.Millisecond}}})
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "x", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("x"), d)
	waitFor(t, "versions 1 and 3", func() bool { return rcv.ackedCount() == 2 })
	return healed, rcv, ep, d
}
