package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The receiver verifies with the Standard Webhooks library; these tests
// sign with ledgerd's own internal/webhook (Sign, SetHeaders, Body), so
// each implementation checks the other.

// The Standard Webhooks test vector: the specification's reference
// libraries' libraries/go/webhook_test.go (TestWebhookSign), as
// internal/webhook's sign_test.go quotes it.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSpecificationVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTimestamp, 0)
	lib, err := standardwebhooks.NewWebhook(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := lib.Sign(vectorMsgID, at, []byte(vectorBody)); got != vectorSignature {
		t.Errorf("the library signs the vector %q, want %q", got, vectorSignature)
	}
	secret, err := webhook.ParseSecret(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	webhook.SetHeaders(h, []webhook.Secret{secret}, vectorMsgID, at, []byte(vectorBody))
	if got := h.Get(webhook.HeaderSignature); got != vectorSignature {
		t.Errorf("internal/webhook signs the vector %q, want %q", got, vectorSignature)
	}
	if err := lib.VerifyIgnoringTimestamp([]byte(vectorBody), h); err != nil {
		t.Errorf("the library does not verify internal/webhook's headers for the vector: %v", err)
	}

	// The vector's timestamp is from 2021: the receiver refuses it as a
	// replay, however good its signature.
	var out strings.Builder
	rec, err := newReceiver(vectorSecret, &out)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	rec.ServeHTTP(w, deliveryRequest(h, []byte(vectorBody)))
	if w.Code != http.StatusUnauthorized || !strings.Contains(out.String(), "too old") {
		t.Errorf("the vector as sent in 2021: %d, printed %q; want 401, too old", w.Code, out.String())
	}
}

// Beyond the vector: for random secrets, ids, times and bodies, the two
// implementations sign alike, and each verifies the other's signature.
func TestImplementationsAgree(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for i := range 100 {
		secret := webhook.NewSecret()
		lib, err := standardwebhooks.NewWebhook(secret.Text())
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("01JDX%020d", rand.Int64())
		at := now.Add(time.Duration(rand.IntN(500)-250) * time.Second)
		body := make([]byte, rand.IntN(2048))
		for j := range body {
			body[j] = byte(rand.IntN(256))
		}
		ours := signed([]webhook.Secret{secret}, id, at, body)
		theirs, _ := lib.Sign(id, at, body)
		if got := ours.Get(webhook.HeaderSignature); got != theirs {
			t.Fatalf("case %d: internal/webhook signs %q, the library %q", i, got, theirs)
		}
		if err := lib.Verify(body, ours); err != nil {
			t.Fatalf("case %d: the library refuses internal/webhook's signature: %v", i, err)
		}
		h := ours.Clone()
		h.Set(webhook.HeaderSignature, theirs)
		if err := webhook.Verify([]webhook.Secret{secret}, h, body, now, webhook.DefaultTolerance); err != nil {
			t.Fatalf("case %d: internal/webhook refuses the library's signature: %v", i, err)
		}
	}
}

// delivery is one event as ledgerd sends it: its body built by
// webhook.Body, signed by webhook.SetHeaders.
type delivery struct {
	id      string
	user    string
	version string // JSON: "3", as protojson writes an int64 (every event's version)
	typ     ledger.EventType
}

func (d delivery) body(tb testing.TB) []byte {
	tb.Helper()
	data := fmt.Sprintf(`{"event_id":%q,"user_id":%q,"version":%s,"entry":{"amount":"-10"}}`, d.id, d.user, d.version)
	b, err := webhook.Body(d.typ, time.Now(), []byte(data))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func signed(secrets []webhook.Secret, id string, at time.Time, body []byte) http.Header {
	h := http.Header{}
	webhook.SetHeaders(h, secrets, id, at, body)
	return h
}

func deliveryRequest(h http.Header, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
	for k, v := range h {
		r.Header[k] = v
	}
	r.Header.Set("Content-Type", "application/json")
	return r
}

func TestVerification(t *testing.T) {
	t.Parallel()
	secret, old, other := webhook.NewSecret(), webhook.NewSecret(), webhook.NewSecret()
	d := delivery{id: "01JDXEVENT", user: "alice", version: `"1"`, typ: ledger.EventPointsGranted}
	now := time.Now()
	tests := []struct {
		name   string
		method string
		header func(body []byte) http.Header
		body   func(body []byte) []byte // what arrives, from what was signed
		want   int
	}{
		{name: "signed now", header: func(b []byte) http.Header { return signed([]webhook.Secret{secret}, d.id, now, b) },
			want: http.StatusNoContent},
		{name: "during a rotation, by the new and the old secret", header: func(b []byte) http.Header {
			return signed([]webhook.Secret{old, secret}, d.id, now, b)
		}, want: http.StatusNoContent},
		{name: "by another secret", header: func(b []byte) http.Header { return signed([]webhook.Secret{other}, d.id, now, b) },
			want: http.StatusUnauthorized},
		{name: "the body changed after signing", header: func(b []byte) http.Header {
			return signed([]webhook.Secret{secret}, d.id, now, b)
		}, body: func(b []byte) []byte { return []byte(strings.Replace(string(b), `"-10"`, `"-1000"`, 1)) },
			want: http.StatusUnauthorized},
		{name: "another webhook-id than signed", header: func(b []byte) http.Header {
			h := signed([]webhook.Secret{secret}, "01JDXOTHER", now, b)
			h.Set(webhook.HeaderID, d.id)
			return h
		}, want: http.StatusUnauthorized},
		{name: "no signature", header: func(b []byte) http.Header {
			h := signed([]webhook.Secret{secret}, d.id, now, b)
			h.Del(webhook.HeaderSignature)
			return h
		}, want: http.StatusUnauthorized},
		{name: "signed 10 minutes ago", header: func(b []byte) http.Header {
			return signed([]webhook.Secret{secret}, d.id, now.Add(-10*time.Minute), b)
		}, want: http.StatusUnauthorized},
		{name: "signed 10 minutes ahead", header: func(b []byte) http.Header {
			return signed([]webhook.Secret{secret}, d.id, now.Add(10*time.Minute), b)
		}, want: http.StatusUnauthorized},
		{name: "signed, but not an event", header: func(b []byte) http.Header {
			return signed([]webhook.Secret{secret}, d.id, now, []byte(`{"hello":1}`))
		}, body: func([]byte) []byte { return []byte(`{"hello":1}`) }, want: http.StatusBadRequest},
		{name: "a GET", method: http.MethodGet, header: func(b []byte) http.Header {
			return signed([]webhook.Secret{secret}, d.id, now, b)
		}, want: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			rec, err := newReceiver(secret.Text(), &out)
			if err != nil {
				t.Fatal(err)
			}
			b := d.body(t)
			h := tt.header(b)
			if tt.body != nil {
				b = tt.body(b)
			}
			r := deliveryRequest(h, b)
			if tt.method != "" {
				r.Method = tt.method
			}
			w := httptest.NewRecorder()
			rec.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("answered %d, want %d; printed %q", w.Code, tt.want, out.String())
			}
			if tt.want == http.StatusNoContent {
				return
			}
			// A refused delivery is not received: the same event, signed
			// now, is new to the receiver, not a duplicate.
			out.Reset()
			b = d.body(t)
			w = httptest.NewRecorder()
			rec.ServeHTTP(w, deliveryRequest(signed([]webhook.Secret{secret}, d.id, time.Now(), b), b))
			if w.Code != http.StatusNoContent || out.String() != "alice version 1 points.granted\n" {
				t.Errorf("after the refusal, the event signed now: %d, printed %q", w.Code, out.String())
			}
		})
	}
}

func TestNewReceiverRefusesABadSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!"} {
		if _, err := newReceiver(secret, io.Discard); err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET") {
			t.Errorf("newReceiver(%q): %v, want an error naming WEBHOOK_SECRET", secret, err)
		}
	}
}

// orderStep is a delivery and the line the receiver prints for it.
type orderStep struct {
	d    delivery
	want string
}

// deliverInTurn sends each step's delivery, signed, to one receiver, and
// checks that it answers 204 and prints the step's line.
func deliverInTurn(t *testing.T, steps []orderStep) {
	t.Helper()
	secret := webhook.NewSecret()
	var out strings.Builder
	rec, err := newReceiver(secret.Text(), &out)
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range steps {
		out.Reset()
		b := step.d.body(t)
		w := httptest.NewRecorder()
		rec.ServeHTTP(w, deliveryRequest(signed([]webhook.Secret{secret}, step.d.id, time.Now(), b), b))
		if w.Code != http.StatusNoContent {
			t.Errorf("step %d (%s): answered %d, want 204 (a duplicate too, or the ledger sends it again)", i, step.d.id, w.Code)
		}
		if got := strings.TrimSuffix(out.String(), "\n"); got != step.want {
			t.Errorf("step %d (%s): printed %q, want %q", i, step.d.id, got, step.want)
		}
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	deliverInTurn(t, []orderStep{
		{delivery{"a1", "alice", `"1"`, ledger.EventPointsGranted}, "alice version 1 points.granted"},
		{delivery{"a2", "alice", `"2"`, ledger.EventPointsSpent}, "alice version 2 points.spent"},
		{delivery{"a2", "alice", `"2"`, ledger.EventPointsSpent}, "alice version 2 points.spent: duplicate of webhook-id a2, already received"},
		{delivery{"a5", "alice", `"5"`, ledger.EventPointsRefunded}, "alice version 5 points.refunded GAP: versions 3 to 4 missing"},
		// A user first seen at version 7: the endpoint is younger than
		// the user's first entries.
		{delivery{"b7", "bob", `"7"`, ledger.EventPointsGranted}, "bob version 7 points.granted"},
		{delivery{"n1", "alice", `"5"`, ledger.EventPointsExpiring}, "alice version 5 points.expiring (a notice: outside the version order)"},
		// A redelivery of what the ledger gave up on.
		{delivery{"a3", "alice", `"3"`, ledger.EventPointsSpent}, "alice version 3 points.spent (fills the GAP below version 5)"},
		{delivery{"a3", "alice", `"3"`, ledger.EventPointsSpent}, "alice version 3 points.spent: duplicate of webhook-id a3, already received"},
		{delivery{"a4", "alice", `"4"`, ledger.EventHoldAuthorized}, "alice version 4 hold.authorized (fills the GAP below version 5)"},
		// Version 2 again under another id is no retry.
		{delivery{"a2-again", "alice", `"2"`, ledger.EventPointsSpent}, "alice version 2 points.spent OUT OF ORDER: version 2 already came, as webhook-id a2"},
		{delivery{"a6", "alice", `"6"`, ledger.EventHoldCaptured}, "alice version 6 hold.captured"},
		{delivery{"b9", "bob", `"9"`, ledger.EventPointsSpent}, "bob version 9 points.spent GAP: version 8 missing"},
	})
}

// TestRedeliveryBackfill: an endpoint created after carol's eighth entry
// receives her from version 9; RedeliverWebhookEvents from version 1 (as
// docs/operations.md does it) then sends versions 1 to 8, which the
// endpoint never had, and 9 and 10 again under their webhook-ids. None of
// it is out of order; a version that comes as a second event still is, in
// the backfill's range as above it.
func TestRedeliveryBackfill(t *testing.T) {
	t.Parallel()
	steps := []orderStep{
		{delivery{"c9", "carol", `"9"`, ledger.EventPointsSpent}, "carol version 9 points.spent"},
		{delivery{"c10", "carol", `"10"`, ledger.EventPointsGranted}, "carol version 10 points.granted"},
	}
	for v := 1; v <= 8; v++ {
		steps = append(steps, orderStep{
			delivery{fmt.Sprintf("c%d", v), "carol", fmt.Sprintf(`"%d"`, v), ledger.EventPointsGranted},
			fmt.Sprintf("carol version %d points.granted (a backfill: older than version 9, the first received)", v),
		})
	}
	steps = append(steps,
		orderStep{delivery{"c9", "carol", `"9"`, ledger.EventPointsSpent}, "carol version 9 points.spent: duplicate of webhook-id c9, already received"},
		orderStep{delivery{"c10", "carol", `"10"`, ledger.EventPointsGranted}, "carol version 10 points.granted: duplicate of webhook-id c10, already received"},
		orderStep{delivery{"c11", "carol", `"11"`, ledger.EventPointsSpent}, "carol version 11 points.spent"},
		// The same redelivery again: duplicates only.
		orderStep{delivery{"c1", "carol", `"1"`, ledger.EventPointsGranted}, "carol version 1 points.granted: duplicate of webhook-id c1, already received"},
		// Real violations: a second event at a backfilled version, and
		// at one received in the first place.
		orderStep{delivery{"c4-other", "carol", `"4"`, ledger.EventPointsSpent}, "carol version 4 points.spent OUT OF ORDER: version 4 already came, as webhook-id c4"},
		orderStep{delivery{"c10-other", "carol", `"10"`, ledger.EventPointsSpent}, "carol version 10 points.spent OUT OF ORDER: version 10 already came, as webhook-id c10"},
	)
	deliverInTurn(t, steps)
}

// TestRun starts the receiver as main does, on a loopback port of its own,
// and sends it a delivery over HTTP.
func TestRun(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	env := map[string]string{"WEBHOOK_SECRET": secret.Text(), "WEBHOOK_LISTEN": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, nil, func(k string) string { return env[k] }, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	// Read as run prints: a pipe's write waits for its reader.
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	first, ok := <-lines
	if !ok {
		t.Fatalf("run printed nothing: %v", <-done)
	}
	addr, ok := strings.CutPrefix(first, "listening on ")
	if !ok || !strings.HasPrefix(addr, "http://127.0.0.1:") {
		t.Fatalf("run printed %q, want listening on http://127.0.0.1:<port>", first)
	}
	d := delivery{id: "01JDXRUN", user: "carol", version: `"1"`, typ: ledger.EventPointsGranted}
	b := d.body(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, addr, strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = signed([]webhook.Secret{secret}, d.id, time.Now(), b)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("the delivery: %s, want 204", resp.Status)
	}
	if got := <-lines; got != "carol version 1 points.granted" {
		t.Errorf("after the delivery run printed %q, want carol version 1 points.granted", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after the interrupt: %v", err)
	}
	for range lines { // to its end
	}

	if err := run(context.Background(), nil, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET") {
		t.Errorf("run without WEBHOOK_SECRET: %v, want an error naming it", err)
	}
	if err := run(context.Background(), []string{"-listen", "127.0.0.1:-1"}, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("run on an address it cannot listen on: %v, want a listen error", err)
	}
}
