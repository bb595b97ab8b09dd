package faulttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// arrival is one request a receiver got, as it judged it.
type arrival struct {
	id      string // webhook-id
	typ     string // the event's type
	user    string
	version int64
	status  int // what it answered; hang: none, the sender's timeout ended it
}

// hang is the answer of a receiver that never answers: the sender's
// attempt timeout ends the request.
const hang = 0

func (a arrival) acked() bool { return a.status >= 200 && a.status <= 299 }

// hook is a webhook receiver on 127.0.0.1, in the test process. It
// verifies every request's signature (webhook.Verify, the endpoint's
// secret) and records it, deciding its answer under the same lock, before
// it answers: so its log puts a request after every 2xx the sender had
// when it sent it, which is what order per user is judged on.
type hook struct {
	name       string
	types      []string // the endpoint's event types
	endpointID string
	addr       string // 127.0.0.1:port, the same when it comes back
	// answer decides the status of a request that verified, under mu;
	// h.seen already counts it.
	answer func(h *hook, a arrival) int

	mu         sync.Mutex
	srv        *http.Server // nil while down
	secrets    []webhook.Secret
	log        []arrival         // every request, in arrival order
	seen       map[string]int    // webhook-id -> requests
	event      map[string]string // webhook-id -> the event it carried first (canonical JSON, but the refunded amount)
	refundedOf map[string]string // webhook-id -> its entry's refunded_amount in the first request
	// refunded counts requests that carried another refunded_amount in
	// their entry than the event's first request: the one field of an
	// entry that changes (a purchase's, by its refunds), read from the
	// ledger at each attempt.
	refunded int
	ackedBy  map[string]int  // user -> events answered 2xx
	acked    map[string]bool // webhook-id -> answered 2xx once
	bad      []string        // requests that broke the rules
	// What the faults did: requests answered 500, and left to time out.
	answered500, timedOut int
}

// startHook serves a receiver on a free port of 127.0.0.1 until the test
// ends.
func startHook(t *testing.T, name string, types []string, answer func(h *hook, a arrival) int) *hook {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hook{name: name, types: types, addr: ln.Addr().String(), answer: answer,
		seen: map[string]int{}, event: map[string]string{}, refundedOf: map[string]string{}, ackedBy: map[string]int{}, acked: map[string]bool{}}
	h.serve(ln)
	t.Cleanup(h.stop)
	return h
}

func (h *hook) url() string { return "http://" + h.addr + "/hook" }

func (h *hook) serve(ln net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// stop closes the listener and the connections: the receiver is down, and
// a dispatcher's attempt is refused.
func (h *hook) stop() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// restart serves again on the same port.
func (h *hook) restart(t *testing.T) {
	t.Helper()
	var ln net.Listener
	waitFor(t, "the receiver's port to be free again", func() bool {
		var err error
		ln, err = net.Listen("tcp", h.addr)
		return err == nil
	})
	h.serve(ln)
}

// eventBody is what the receiver reads of a delivery's body.
type eventBody struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		EventID string `json:"event_id"`
		UserID  string `json:"user_id"`
		Version string `json:"version"` // a decimal string, as in every event (docs/events.md)
		Entry   struct {
			EntryID    string `json:"entry_id"`
			Version    string `json:"version"` // an int64 in the API's JSON: a string
			CreateTime string `json:"create_time"`
		} `json:"entry"`
	} `json:"data"`
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	var msg eventBody
	h.mu.Lock()
	var problem string
	switch {
	case webhook.Verify(h.secrets, r.Header, body, time.Now(), webhook.DefaultTolerance) != nil:
		problem = fmt.Sprintf("%s: webhook-id %s: the signature does not verify", h.name, id)
	case json.Unmarshal(body, &msg) != nil:
		problem = fmt.Sprintf("%s: webhook-id %s: the body is not an event: %s", h.name, id, body)
	case msg.Data.EventID != id || msg.Data.Entry.EntryID != id || msg.Data.Entry.Version != msg.Data.Version || msg.Data.Entry.CreateTime != msg.Timestamp:
		problem = fmt.Sprintf("%s: webhook-id %s: the body is not its entry's event: %s", h.name, id, body)
	}
	version, err := strconv.ParseInt(msg.Data.Version, 10, 64)
	if err != nil && problem == "" {
		problem = fmt.Sprintf("%s: webhook-id %s: version %q is not a decimal string: %s", h.name, id, msg.Data.Version, body)
	}
	a := arrival{id: id, typ: msg.Type, user: msg.Data.UserID, version: version, status: http.StatusBadRequest}
	canonical, refunded := canonicalEvent(body)
	if first, ok := h.event[id]; ok && first != canonical {
		problem = fmt.Sprintf("%s: webhook-id %s carried %s, now %s", h.name, id, first, canonical)
	} else if !ok && problem == "" {
		h.event[id] = canonical
		h.refundedOf[id] = refunded
	} else if ok && h.refundedOf[id] != refunded {
		h.refunded++
	}
	h.seen[id]++
	if problem == "" {
		a.status = h.answer(h, a)
	} else {
		h.bad = append(h.bad, problem)
	}
	switch {
	case a.acked() && !h.acked[id]:
		h.acked[id] = true
		h.ackedBy[a.user]++
	case a.status == http.StatusInternalServerError:
		h.answered500++
	}
	h.log = append(h.log, a)
	h.mu.Unlock()
	if a.status == hang {
		<-r.Context().Done() // the sender gave up, or the receiver went down
		h.mu.Lock()
		h.timedOut++
		h.mu.Unlock()
		return
	}
	w.WriteHeader(a.status)
}

// canonicalEvent is body with its keys sorted and spaces dropped, so that
// two attempts of one event compare equal whoever encoded them, and
// without its entry's refunded_amount, which it returns apart.
func canonicalEvent(body []byte) (canonical, refunded string) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v map[string]any
	if d.Decode(&v) != nil {
		return string(body), ""
	}
	if data, ok := v["data"].(map[string]any); ok {
		if entry, ok := data["entry"].(map[string]any); ok {
			refunded = fmt.Sprint(entry["refunded_amount"])
			delete(entry, "refunded_amount")
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(body), ""
	}
	return string(out), refunded
}

// snapshot returns the log so far.
func (h *hook) snapshot() []arrival {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// subscribes says whether the endpoint receives events of type t.
func (h *hook) subscribes(t ledger.EventType) bool {
	return slices.Contains(h.types, ledger.AllEventTypes) || slices.Contains(h.types, string(t))
}

// gap is the events of one user that a receiver refuses (500) on every
// attempt while it is open, so that the dispatcher gives them up: FAILED.
// It takes the next size new events of user once user has after
// acknowledged: consecutive versions, since each comes only after the
// previous one is given up.
type gap struct {
	user        string
	after, size int
	open        bool
	ids         []string // the events refused, in version order
	versions    []int64
}

// refuses says whether the receiver refuses a; h.mu is held.
func (g *gap) refuses(h *hook, a arrival) bool {
	if !g.open || a.user != g.user {
		return false
	}
	if slices.Contains(g.ids, a.id) {
		return true
	}
	if len(g.ids) < g.size && h.seen[a.id] == 1 && h.ackedBy[a.user] >= g.after {
		g.ids = append(g.ids, a.id)
		g.versions = append(g.versions, a.version)
		return true
	}
	return false
}

// full says whether the gap has all its events; h.mu is held by no one.
func (g *gap) full(h *hook) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(g.ids) == g.size
}

// waitLimit bounds every wait of the webhook test: a hang, not the speed.
const waitLimit = 5 * time.Minute

// waitFor waits until cond holds, up to waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitLimit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
