package receive

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
	"github.com/pointledger/pointledger/loadtest/report"
)

// clock is the receiver's time, set by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// delivery is an event as ledgerd sends it: its body by webhook.Body,
// signed at sent by webhook.SetHeaders.
type delivery struct {
	id      string
	user    string
	version int64
	typ     ledger.EventType
	written time.Time // the entry's create_time: the body's timestamp
}

func (d delivery) request(tb testing.TB, secrets []webhook.Secret, sent time.Time) *http.Request {
	tb.Helper()
	// The version as protojson writes an int64: a string.
	data := fmt.Sprintf(`{"event_id":%q,"user_id":%q,"version":"%d","entry":{"amount":"5"}}`, d.id, d.user, d.version)
	body, err := webhook.Body(d.typ, d.written, []byte(data))
	if err != nil {
		tb.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	webhook.SetHeaders(req.Header, secrets, d.id, sent, body)
	return req
}

func serve(tb testing.TB, h http.Handler, req *http.Request) int {
	tb.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

func TestReceiverCounts(t *testing.T) {
	t.Parallel()
	secret, other := webhook.NewSecret(), webhook.NewSecret()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	r := New(Options{Secrets: []webhook.Secret{secret}, Now: c.Now})
	r.Begin()
	steps := []struct {
		d        delivery
		received time.Duration // after t0
		secrets  []webhook.Secret
		want     int
	}{
		{delivery{"a1", "alice", 1, ledger.EventPointsGranted, t0}, 10 * time.Millisecond, nil, http.StatusNoContent},
		{delivery{"a2", "alice", 2, ledger.EventPointsSpent, t0.Add(time.Second)}, time.Second + 30*time.Millisecond, nil, http.StatusNoContent},
		// A retry of a2: acknowledged, counted once.
		{delivery{"a2", "alice", 2, ledger.EventPointsSpent, t0.Add(time.Second)}, 2 * time.Second, nil, http.StatusNoContent},
		// alice's 3 and 4 given up: a gap of two.
		{delivery{"a5", "alice", 5, ledger.EventPointsRefunded, t0.Add(2 * time.Second)}, 2*time.Second + 20*time.Millisecond, nil, http.StatusNoContent},
		// A redelivery fills half of it.
		{delivery{"a3", "alice", 3, ledger.EventHoldAuthorized, t0.Add(1500 * time.Millisecond)}, 3 * time.Second, nil, http.StatusNoContent},
		// Version 2 under another id: out of order.
		{delivery{"a2-other", "alice", 2, ledger.EventPointsSpent, t0.Add(time.Second)}, 3 * time.Second, nil, http.StatusNoContent},
		// bob first seen at 3: his sequence starts there.
		{delivery{"b3", "bob", 3, ledger.EventPointsGranted, t0.Add(3 * time.Second)}, 3*time.Second + 40*time.Millisecond, nil, http.StatusNoContent},
		// A notice: outside the order, no lag.
		{delivery{"n1", "bob", 3, ledger.EventPointsExpiring, t0}, 4 * time.Second, nil, http.StatusNoContent},
		// Signed by another secret: refused, and not received.
		{delivery{"b4", "bob", 4, ledger.EventPointsSpent, t0.Add(4 * time.Second)}, 4 * time.Second, []webhook.Secret{other}, http.StatusUnauthorized},
		{delivery{"b4", "bob", 4, ledger.EventPointsSpent, t0.Add(4 * time.Second)}, 4*time.Second + 50*time.Millisecond, nil, http.StatusNoContent},
	}
	for i, s := range steps {
		c.set(t0.Add(s.received))
		secrets := s.secrets
		if secrets == nil {
			secrets = []webhook.Secret{secret}
		}
		if got := serve(t, r, s.d.request(t, secrets, c.Now())); got != s.want {
			t.Errorf("step %d (%s): answered %d, want %d", i, s.d.id, got, s.want)
		}
	}
	// Signed, but not an event.
	notEvent := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader([]byte(`{"hello":1}`)))
	webhook.SetHeaders(notEvent.Header, []webhook.Secret{secret}, "x1", c.Now(), []byte(`{"hello":1}`))
	if got := serve(t, r, notEvent); got != http.StatusBadRequest {
		t.Errorf("a signed body that is no event: answered %d, want 400", got)
	}
	c.set(t0.Add(5 * time.Second))
	r.End()

	got := r.Result()
	want := report.Webhooks{
		Deliveries: 11, Events: 8, Notices: 1, Duplicates: 1, Refused: 1, Malformed: 1, Users: 2,
		Gaps: 1, Missing: 1, OutOfOrder: 1,
		EventsPerS: 8.0 / 5, // over Begin to End
		ByType: map[string]int64{"points.granted": 2, "points.spent": 3, "points.refunded": 1,
			"hold.authorized": 1, "points.expiring": 1},
	}
	// Lags: 10, 30, 20, 1500, 2000, 40, 50 ms (the notice has none).
	lag := got.Lag
	got.Lag = report.Percentiles{}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Result:\n got %+v\nwant %+v", got, want)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.001 }
	if lag.Count != 7 || !near(lag.P50, 40) || !near(lag.Max, 2000) {
		t.Errorf("lag %+v, want 7 events, p50 40 ms, max 2000 ms", lag)
	}
	if v := got.Violations(); len(v) != 5 {
		t.Errorf("violations %q, want refused, malformed, gaps, missing and out of order", v)
	}
}

// With FromVersion1 a user's first event must be version 1.
func TestFromVersion1(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	now := time.Now()
	for _, from1 := range []bool{false, true} {
		r := New(Options{Secrets: []webhook.Secret{secret}, FromVersion1: from1})
		d := delivery{"c3", "carol", 3, ledger.EventPointsGranted, now}
		if got := serve(t, r, d.request(t, []webhook.Secret{secret}, now)); got != http.StatusNoContent {
			t.Fatalf("answered %d", got)
		}
		res := r.Result()
		if wantGaps := map[bool]int64{false: 0, true: 1}[from1]; res.Gaps != wantGaps || res.Missing != 2*wantGaps {
			t.Errorf("FromVersion1 %v, carol first seen at 3: %d gaps, %d missing; want %d and %d",
				from1, res.Gaps, res.Missing, wantGaps, 2*wantGaps)
		}
	}
}

// The measurement: events received before Begin count for order but not
// for the rate; the lag is of the entries written between Begin and End,
// whenever they arrive.
func TestMeasurement(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	r := New(Options{Secrets: []webhook.Secret{secret}, Now: c.Now})
	send := func(d delivery, at time.Time) {
		c.set(at)
		if got := serve(t, r, d.request(t, []webhook.Secret{secret}, at)); got != http.StatusNoContent {
			t.Fatalf("%s: answered %d", d.id, got)
		}
	}
	send(delivery{"w1", "dan", 1, ledger.EventPointsGranted, t0}, t0.Add(time.Second)) // the warm-up
	c.set(t0.Add(2 * time.Second))
	r.Begin()
	send(delivery{"w2", "dan", 2, ledger.EventPointsSpent, t0.Add(3 * time.Second)}, t0.Add(3*time.Second+100*time.Millisecond))
	c.set(t0.Add(4 * time.Second))
	r.End()
	// Written during the measurement, received after it: its lag counts.
	send(delivery{"w3", "dan", 3, ledger.EventPointsSpent, t0.Add(3500 * time.Millisecond)}, t0.Add(5*time.Second))
	// Written after it: not measured.
	send(delivery{"w4", "dan", 4, ledger.EventPointsSpent, t0.Add(5 * time.Second)}, t0.Add(9*time.Second))

	res := r.Result()
	if res.Events != 4 || res.Gaps != 0 || res.OutOfOrder != 0 {
		t.Errorf("%d events, %d gaps, %d out of order; want 4, 0, 0", res.Events, res.Gaps, res.OutOfOrder)
	}
	if res.EventsPerS != 0.5 { // one received in the 2 s measured
		t.Errorf("EventsPerS %v, want 0.5", res.EventsPerS)
	}
	if res.Lag.Count != 2 || res.Lag.Max < 1499 || res.Lag.Max > 1501 {
		t.Errorf("lag %+v, want w2's 100 ms and w3's 1500 ms", res.Lag)
	}
}

// Over HTTP on loopback, users in parallel, each in order, signed by the
// new and the old secret of a rotation while the receiver knows the old
// one only.
func TestServer(t *testing.T) {
	t.Parallel()
	newSecret, oldSecret := webhook.NewSecret(), webhook.NewSecret()
	s, err := Start(Options{Secrets: []webhook.Secret{oldSecret}, FromVersion1: true})
	if err != nil {
		t.Fatal(err)
	}
	const users, versionsEach = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, users*versionsEach)
	for u := range users {
		wg.Go(func() {
			for v := int64(1); v <= versionsEach; v++ {
				d := delivery{fmt.Sprintf("e-%d-%d", u, v), fmt.Sprintf("user-%d", u), v, ledger.EventPointsGranted, time.Now()}
				req := d.request(t, []webhook.Secret{newSecret, oldSecret}, time.Now())
				out, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL, req.Body)
				if err != nil {
					errs <- err
					return
				}
				out.Header = req.Header
				resp, err := http.DefaultClient.Do(out)
				if err != nil {
					errs <- err
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					errs <- fmt.Errorf("%s: %s", d.id, resp.Status)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Error(err)
	}
	res := s.Result()
	if res.Events != users*versionsEach || res.Users != users || len(res.Violations()) != 0 || res.Lag.Count != users*versionsEach {
		t.Errorf("Result %+v, want %d events for %d users, lag of each, no violation", res, users*versionsEach, users)
	}
}

// A delivery signed by a secret the receiver was told of after it started
// verifies; before, it was refused.
func TestTrust(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	r := New(Options{})
	now := time.Now()
	d := delivery{"t1", "erin", 1, ledger.EventPointsGranted, now}
	if got := serve(t, r, d.request(t, []webhook.Secret{secret}, now)); got != http.StatusUnauthorized {
		t.Fatalf("before Trust: answered %d, want 401", got)
	}
	r.Trust(secret)
	if got := serve(t, r, d.request(t, []webhook.Secret{secret}, now)); got != http.StatusNoContent {
		t.Fatalf("after Trust: answered %d, want 204", got)
	}
	if res := r.Result(); res.Events != 1 || res.Refused != 1 {
		t.Errorf("%d events, %d refused; want 1 and 1", res.Events, res.Refused)
	}
}
