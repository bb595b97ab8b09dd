package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/webhook"
	"github.com/pointledger/pointledger/migrations"
)

// retryDelays is the dispatchers' schedule here (-webhook-retry-delays):
// four attempts, 0.7 s apart in all, and a pass of the "due" index (every
// second) before each retry, so that an event is given up within seconds.
// docs/operations.md quotes it.
const retryDelays = "100ms,200ms,400ms"

// What the receivers' faults cost is bounded, since a retry waits for a
// pass of the "due" index, and a user's next event waits for it: the 500s
// are answered to the first attempt of the first events only, and one
// event in 8 of the first ones times out.
const (
	flakyEvents    = 30 // events whose first attempt gets a 500
	slowEvents     = 80 // events of which one in 8 times out at first
	slowOneIn      = 8
	attemptTimeout = "1s" // -webhook-attempt-timeout
)

// attemptsPerEvent is what retryDelays gives an event before it is FAILED.
var attemptsPerEvent = strings.Count(retryDelays, ",") + 2

// webhookRun is the load of the webhook test: fewer clients than the
// small run, on its 5 users and one quiet one, none of whose entries is
// written by the sweeper (off here: no entry may come once the load has
// stopped).
func webhookRun() shape {
	return shape{ledgerds: 1, workers: 6, users: names("u", 5), quietUsers: names("q", 1)}
}

// minWebhookAcked is how many acknowledged requests (entries) make the
// webhook test prove something.
const minWebhookAcked = 120

// TestWebhooksThroughFaults: the fault suite's load of grants (pending ones
// too), purchases, refunds, reversals and holds (expirations, maturations
// and releases of expired holds come with the next mutation) goes through ledgerd, on DynamoDB Local behind the
// fault proxy, while two `ledgerd dispatch` processes, started together,
// race for the stream's shards and the endpoints' queues and deliver to
// three receivers on 127.0.0.1 (startHooks): one answers 500 for a while,
// and to every attempt of three events of u0 (a gap) until they are given
// up; one lets attempts time out (-webhook-attempt-timeout 1s); one, which
// subscribes to a few types only, goes down (its listener closed) until a
// dispatcher's attempt is refused, and comes back on the same port.
// Meanwhile the dispatcher seen delivering is killed with SIGKILL and
// restarted (its queues wait for their claims to expire: the attempt
// timeout and 30 s). serve runs no dispatcher (-dispatcher=false), so
// that the dispatchers are exactly the two processes the test races and
// kills: a third, in serve, would take on the killed one's work and hide
// the kill from the deliveries. Notices are off: they are outside a
// user's version order, and tested in internal/dispatch and notice.
//
// Once every entry is delivered or FAILED: every request verified, each
// webhook-id always carried the same event, that of the entry of its user
// and version; for each receiver and user, every entry whose type it
// subscribes to reached it (2xx) or its delivery row is FAILED after the
// schedule's last attempt, it received nothing else, and the versions came
// in order: never lower than one before it (a repeat is the same
// webhook-id), never past an event neither acknowledged nor given up (a
// FAILED one counts as given up after its last attempt, where the
// receiver saw them all). The gap's rows are FAILED; then
// RedeliverWebhookEvents from the gap's first version sends u0's events
// again, in order, and the receiver has every version of u0.
func TestWebhooksThroughFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults")
	}
	t.Parallel()
	began := time.Now()
	hookEnv := []string{"LEDGER_WEBHOOK_ALLOW_HTTP=true", "LEDGER_WEBHOOK_ALLOW_LOOPBACK=true",
		"LEDGER_WEBHOOK_ATTEMPT_TIMEOUT=" + attemptTimeout, "LEDGER_WEBHOOK_RETRY_DELAYS=" + retryDelays, "LEDGER_NOTICE_LEADS=off"}
	s := startServices(t, setup{ledgerds: 1, serveEnv: append([]string{"LEDGER_DISPATCHER=false", "LEDGER_SWEEPER=false"}, hookEnv...)})
	dispatchers := []*dispatcher{s.startDispatcher(t, hookEnv), s.startDispatcher(t, hookEnv)}
	admin := pointledgerv1connect.NewWebhookServiceClient(http.DefaultClient, s.apis[0], connect.WithInterceptors(auth.Bearer(s.creds.AdminToken)))

	sh := webhookRun()
	// The gap comes late in u0's events, so that the redelivery from it
	// sends few events again.
	g := &gap{user: sh.users[0], after: 8, size: 3, open: true}
	hooks := startHooks(t, admin, g)
	flaky := hooks[0]
	t.Logf("started in %s", time.Since(began).Round(time.Second))

	s.createKinds(t) // the load grants and spends them
	l := startLoad(s.clients, sh)
	f := injectWebhookFaults(t, admin, dispatchers, hooks[2], l)
	// The gap's events come after u0's first g.after acknowledged: a few
	// more entries than that cover events given up before it.
	gapEntries := int64(g.after + g.size + 5)
	waitFor(t, fmt.Sprintf("%d acknowledged requests, %d entries of %s", minWebhookAcked, gapEntries, g.user), func() bool {
		return l.acked.Load() >= minWebhookAcked && entriesOf(s.clients[0], g.user) >= gapEntries
	})
	l.stop()
	t.Logf("load stopped: %d requests, %d acknowledged, in %s", len(l.book), l.acked.Load(), l.took.Round(time.Second))

	entries := s.entriesOf(t, append(slices.Clone(sh.users), sh.quietUsers...))
	failed := waitDelivered(t, admin, hooks, g, entries)
	t.Logf("every entry delivered or FAILED at every receiver, %s after the start", time.Since(began).Round(time.Second))
	v := &verdict{t: t}
	for _, h := range hooks {
		h.checkDelivered(entries, failed[h], h.snapshot(), v)
	}
	g.checkFailed(flaky, failed[flaky], v)
	f.checkCoverage(hooks, dispatchers, v)
	repeats := map[*hook]int{}
	for _, h := range hooks {
		repeats[h] = h.repeats()
	}
	redelivered := redeliverGap(t, admin, flaky, g, entries[g.user], v)
	t.Logf("%s", f.summary(hooks, dispatchers, entries, failed, repeats, g, redelivered, l, v))
	if t.Failed() {
		t.Logf("ledgerd's logs (the last %d KiB):\n%s", logTail>>10, tail(s.logs.String(), logTail))
	}
}

// startHooks starts the three receivers, [the 500s, the timeouts, down and
// back], and creates their endpoints through WebhookService, once ledgerd
// serves: the 500s answer 500 to the first attempt of the first
// flakyEvents events and to every attempt of g's events while it is open;
// the timeouts hang at the first attempt of one in slowOneIn of the first
// slowEvents events; down and back receives a few types only.
func startHooks(t *testing.T, admin pointledgerv1connect.WebhookServiceClient, g *gap) []*hook {
	t.Helper()
	flaky := startHook(t, "500s", []string{ledger.AllEventTypes}, func(h *hook, a arrival) int {
		if g.refuses(h, a) || (h.seen[a.id] == 1 && len(h.event) <= flakyEvents) {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	slow := startHook(t, "timeouts", []string{ledger.AllEventTypes}, func(h *hook, a arrival) int {
		if h.seen[a.id] == 1 && len(h.event) <= slowEvents && len(h.event)%slowOneIn == 1 {
			return hang
		}
		return http.StatusNoContent
	})
	down := startHook(t, "down and back", []string{string(ledger.EventPointsSpent), string(ledger.EventPointsRefunded),
		string(ledger.EventHoldCaptured), string(ledger.EventPointsExpired)}, func(*hook, arrival) int { return http.StatusNoContent })
	hooks := []*hook{flaky, slow, down}
	waitFor(t, "ledgerd to serve", func() bool {
		_, err := admin.ListWebhookEndpoints(context.Background(), connect.NewRequest(&pb.ListWebhookEndpointsRequest{}))
		return err == nil
	})
	for _, h := range hooks {
		res, err := admin.CreateWebhookEndpoint(context.Background(), connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: h.url(), EventTypes: h.types, Description: h.name}))
		if err != nil {
			t.Fatalf("create the endpoint of %s: %v", h.name, err)
		}
		secret, err := webhook.ParseSecret(res.Msg.Secret)
		if err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		h.endpointID, h.secrets = res.Msg.Endpoint.EndpointId, []webhook.Secret{secret}
		h.mu.Unlock()
	}
	return hooks
}

// injectWebhookFaults kills the first dispatcher seen delivering
// (SIGKILL) and starts it again, then takes down the receiver down until
// a dispatcher's attempt at it is refused, and brings it back.
func injectWebhookFaults(t *testing.T, admin pointledgerv1connect.WebhookServiceClient, dispatchers []*dispatcher, down *hook, l *load) *webhookFaults {
	t.Helper()
	var f webhookFaults
	waitFor(t, "a dispatcher delivering", func() bool {
		for _, d := range dispatchers {
			if st, err := d.status(); err == nil && st.InFlight > 0 && st.Attempts > 0 {
				f.killed, f.atKill = d, st
				return true
			}
		}
		return false
	})
	t.Logf("SIGKILL dispatcher %s mid-delivery: %d queues in flight, %d attempts made (%d requests answered)", f.atKill.Owner, f.atKill.InFlight, f.atKill.Attempts, l.answered.Load())
	f.killed.kill()
	time.Sleep(time.Second)
	t.Logf("restart it")
	f.killed.start(t)

	t.Logf("take %s down (%d requests answered)", down.name, l.answered.Load())
	down.stop()
	waitFor(t, "a dispatcher's attempt refused by the receiver that is down", func() bool {
		rows, err := deliveries(admin, down.endpointID, "", pb.DeliveryState_DELIVERY_STATE_PENDING)
		for _, r := range rows {
			if err == nil && strings.Contains(r.LastError, "connection refused") {
				f.refusedWhileDown = r
				return true
			}
		}
		return false
	})
	t.Logf("bring %s back on %s: %s v%d refused (%s)", down.name, down.addr, f.refusedWhileDown.UserId, f.refusedWhileDown.Version, f.refusedWhileDown.LastError)
	down.restart(t)
	f.ackedBeforeBack = down.ackedCount()
	return &f
}

// waitDelivered waits until every receiver has every event it subscribes
// to acknowledged or FAILED, g's too, and returns the FAILED rows of each.
func waitDelivered(t *testing.T, admin pointledgerv1connect.WebhookServiceClient, hooks []*hook, g *gap, entries map[string][]ledger.Entry) map[*hook]map[string]map[int64]*pb.WebhookDelivery {
	t.Helper()
	var failed map[*hook]map[string]map[int64]*pb.WebhookDelivery
	waitFor(t, "every entry delivered or FAILED at every receiver", func() bool {
		failed = map[*hook]map[string]map[int64]*pb.WebhookDelivery{}
		if !g.full(hooks[0]) {
			return false
		}
		for _, h := range hooks {
			var err error
			if failed[h], err = failedRows(admin, h.endpointID); err != nil || len(h.missing(entries, failed[h])) > 0 {
				return false
			}
		}
		return true
	})
	return failed
}

// webhookFaults is what the webhook test did, for its checks and report.
type webhookFaults struct {
	killed           *dispatcher
	atKill           dispatch.Status // the killed dispatcher's, just before
	refusedWhileDown *pb.WebhookDelivery
	ackedBeforeBack  int
}

// dispatcher is a `ledgerd dispatch` process and its operations listener.
type dispatcher struct {
	*process
	ops string // host:port
}

// startDispatcher starts `ledgerd dispatch` on the proxy, with env added to
// its environment, until the test ends.
func (s *services) startDispatcher(t *testing.T, env []string) *dispatcher {
	t.Helper()
	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{ops: fmt.Sprintf("127.0.0.1:%d", port), process: &process{bin: s.bin, env: append(slices.Clone(s.proxied), env...), out: s.logs}}
	d.args = []string{"dispatch", "-ops-listen", d.ops}
	d.start(t)
	t.Cleanup(d.kill)
	return d
}

// status is what the dispatcher says of itself (GET /dispatch/status).
func (d *dispatcher) status() (dispatch.Status, error) {
	var st dispatch.Status
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ops+"/dispatch/status", nil)
	if err != nil {
		return st, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return st, fmt.Errorf("dispatch status: %s", res.Status)
	}
	return st, json.NewDecoder(res.Body).Decode(&st)
}

// deliveries lists an endpoint's delivery rows (of user, if not "") in
// the given states, every page.
func deliveries(admin pointledgerv1connect.WebhookServiceClient, endpointID, user string, states ...pb.DeliveryState) ([]*pb.WebhookDelivery, error) {
	var rows []*pb.WebhookDelivery
	req := &pb.ListWebhookDeliveriesRequest{EndpointId: endpointID, UserId: user, States: states, PageSize: ledger.MaxPageSize}
	for {
		res, err := admin.ListWebhookDeliveries(context.Background(), connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		rows = append(rows, res.Msg.Deliveries...)
		if req.PageToken = res.Msg.NextPageToken; req.PageToken == "" {
			return rows, nil
		}
	}
}

// failedRows is an endpoint's FAILED delivery rows, by user and version.
func failedRows(admin pointledgerv1connect.WebhookServiceClient, endpointID string) (map[string]map[int64]*pb.WebhookDelivery, error) {
	rows, err := deliveries(admin, endpointID, "", pb.DeliveryState_DELIVERY_STATE_FAILED)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int64]*pb.WebhookDelivery{}
	for _, r := range rows {
		if out[r.UserId] == nil {
			out[r.UserId] = map[int64]*pb.WebhookDelivery{}
		}
		out[r.UserId][r.Version] = r
	}
	return out, nil
}

// entriesOf reads every entry of users from DynamoDB (not through the
// proxy), by user, in version order.
func (s *services) entriesOf(t *testing.T, users []string) map[string][]ledger.Entry {
	t.Helper()
	store := dynamo.New(dynamolocal.NewClient(s.emu.Endpoint), dynamo.Options{Table: migrations.LedgerTable})
	out := map[string][]ledger.Entry{}
	for _, u := range users {
		es, err := store.EntriesAfter(context.Background(), u, 0, math.MaxInt)
		if err != nil {
			t.Fatal(err)
		}
		out[u] = es
	}
	return out
}

// wanted is the versions of entries whose events h's endpoint receives.
func (h *hook) wanted(entries []ledger.Entry) []int64 {
	var vs []int64
	for _, e := range entries {
		if h.subscribes(ledger.EventTypeOf(e.Type)) {
			vs = append(vs, e.Version)
		}
	}
	return vs
}

func (h *hook) ackedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// missing is the events h should have and has neither acknowledged nor
// seen given up (FAILED): user/version.
func (h *hook) missing(entries map[string][]ledger.Entry, failed map[string]map[int64]*pb.WebhookDelivery) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, u := range slices.Sorted(maps.Keys(entries)) {
		for _, v := range h.wanted(entries[u]) {
			if !h.acked[entries[u][v-1].ID] && failed[u][v] == nil {
				out = append(out, fmt.Sprintf("%s/%d", u, v))
			}
		}
	}
	return out
}

// checkDelivered checks what h received (log) against the ledger and its
// endpoint's FAILED rows: nothing broke the rules (signature, body, one
// event per webhook-id); every event it subscribes to was acknowledged or
// FAILED after the schedule's last attempt; and per user, each request was
// of its user's entry at that version, of a type it subscribes to, never
// of a lower version than one before it (but as a re-send of one already
// acknowledged), and never past an event neither acknowledged nor given
// up. A FAILED event counts as given up after the
// last request of it, when the receiver saw as many as the row's attempts
// (an attempt at a receiver that was down never reached it: then from the
// start).
func (h *hook) checkDelivered(entries map[string][]ledger.Entry, failed map[string]map[int64]*pb.WebhookDelivery, log []arrival, v *verdict) {
	h.mu.Lock()
	for _, p := range h.bad {
		v.violate("%s", p)
	}
	h.mu.Unlock()
	for _, m := range h.missing(entries, failed) {
		v.violate("%s: %s was neither acknowledged nor FAILED", h.name, m)
	}
	for u, rows := range failed {
		for version, r := range rows {
			if int(r.Attempts) != attemptsPerEvent {
				v.violate("%s: %s/%d FAILED after %d attempts, the schedule has %d", h.name, u, version, r.Attempts, attemptsPerEvent)
			}
		}
	}
	byUser := map[string][]arrival{}
	for _, a := range log {
		byUser[a.user] = append(byUser[a.user], a)
	}
	for _, u := range slices.Sorted(maps.Keys(byUser)) {
		h.checkOrder(u, entries[u], failed[u], byUser[u], v)
	}
}

// checkOrder checks one user's requests, in arrival order (checkDelivered).
func (h *hook) checkOrder(u string, entries []ledger.Entry, failed map[int64]*pb.WebhookDelivery, arrivals []arrival, v *verdict) {
	seen, last := map[int64]int{}, map[int64]int{} // version -> requests, index of the last
	for i, a := range arrivals {
		seen[a.version]++
		last[a.version] = i
	}
	givenUp := func(version int64, i int) bool {
		r := failed[version]
		return r != nil && (seen[version] < int(r.Attempts) || i > last[version])
	}
	wanted := h.wanted(entries)
	acked := map[int64]bool{}
	next, prev := 0, int64(0) // wanted[next]: the first event neither acknowledged nor given up
	for i, a := range arrivals {
		if a.version < 1 || a.version > int64(len(entries)) {
			v.violate("%s: %s v%d, of %d entries", h.name, u, a.version, len(entries))
			continue
		}
		e := entries[a.version-1]
		switch {
		case a.id != e.ID || a.typ != string(ledger.EventTypeOf(e.Type)):
			v.violate("%s: %s v%d came as %s %s, its entry is %s %s", h.name, u, a.version, a.typ, a.id, ledger.EventTypeOf(e.Type), e.ID)
		case !h.subscribes(ledger.EventType(a.typ)):
			v.violate("%s: %s v%d is a %s, which it does not subscribe to", h.name, u, a.version, a.typ)
		}
		if a.version < prev && !acked[a.version] {
			// An older version again is allowed only as a re-send of one
			// already acknowledged: a dispatcher killed before it wrote a
			// group of 2xx has its successor send the group again, in
			// order (internal/dispatch/doc.go); deduped by webhook-id, as
			// a receiver does, each event came once and in order.
			v.violate("%s: %s v%d came after v%d", h.name, u, a.version, prev)
		}
		for next < len(wanted) && (acked[wanted[next]] || givenUp(wanted[next], i)) {
			next++
		}
		if next < len(wanted) && a.version > wanted[next] {
			v.violate("%s: %s v%d came before v%d was acknowledged or given up", h.name, u, a.version, wanted[next])
		}
		if a.acked() {
			acked[a.version] = true
		}
		prev = max(prev, a.version)
	}
}

// checkFailed checks that the gap's events were given up: each FAILED
// after the schedule's last attempt, every attempt seen by the receiver.
func (g *gap) checkFailed(h *hook, failed map[string]map[int64]*pb.WebhookDelivery, v *verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(g.ids) != g.size {
		v.violate("the gap of %s has %d events, want %d", g.user, len(g.ids), g.size)
	}
	for i, version := range g.versions {
		if r := failed[g.user][version]; r == nil || h.seen[g.ids[i]] < attemptsPerEvent {
			v.violate("%s: the gap's %s v%d: row %v, %d requests seen; want FAILED after %d", h.name, g.user, version, r, h.seen[g.ids[i]], attemptsPerEvent)
		}
		if i > 0 && version != g.versions[i-1]+1 {
			v.violate("the gap of %s is not consecutive versions: %v", g.user, g.versions)
		}
	}
}

// redeliverGap closes the gap (the receiver takes its events again), asks
// RedeliverWebhookEvents for the user's events from the gap's first
// version, and checks that they come again in order, each after the
// previous one's 2xx, until the receiver has every version of the user,
// and that the gap's rows say SUCCEEDED. It returns how many events the
// redelivery sent.
func redeliverGap(t *testing.T, admin pointledgerv1connect.WebhookServiceClient, h *hook, g *gap, entries []ledger.Entry, v *verdict) int64 {
	t.Helper()
	if len(g.versions) == 0 {
		return 0
	}
	h.mu.Lock()
	g.open = false
	mark := len(h.log)
	h.mu.Unlock()
	from, last := g.versions[0], int64(len(entries))
	res, err := admin.RedeliverWebhookEvents(context.Background(), connect.NewRequest(&pb.RedeliverWebhookEventsRequest{
		EndpointId: h.endpointID, UserId: g.user, FromVersion: from}))
	if err != nil {
		t.Fatalf("redeliver %s from v%d: %v", g.user, from, err)
	}
	if res.Msg.Count != last-from+1 {
		v.violate("redeliver %s from v%d of %d: %d events, want %d", g.user, from, last, res.Msg.Count, last-from+1)
	}
	t.Logf("redeliver %s from v%d to %s: %d events", g.user, from, h.name, res.Msg.Count)
	again := func() []arrival {
		var out []arrival
		for _, a := range h.snapshot()[mark:] {
			if a.user == g.user {
				out = append(out, a)
			}
		}
		return out
	}
	acknowledged := func(arrivals []arrival) map[int64]bool {
		out := map[int64]bool{}
		for _, a := range arrivals {
			if a.acked() {
				out[a.version] = true
			}
		}
		return out
	}
	waitFor(t, "the redelivered events", func() bool { return len(acknowledged(again())) == int(last-from+1) })
	next := from // the first version not acknowledged again yet
	for _, a := range again() {
		if a.version < from || a.version > next {
			v.violate("redelivery of %s from v%d: v%d came while v%d waited", g.user, from, a.version, next)
		}
		if a.acked() && a.version == next {
			next++
		}
	}
	// A queue writes its 2xx in groups (internal/dispatch/doc.go): the
	// rows are on the record once the group is, within moments of its
	// last 2xx, not at once.
	var rows []*pb.WebhookDelivery
	notSucceeded := func() (n int) {
		var err error
		if rows, err = deliveries(admin, h.endpointID, g.user); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Version >= from && r.State != pb.DeliveryState_DELIVERY_STATE_SUCCEEDED {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(waitLimit); notSucceeded() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range rows {
		if r.Version >= from && r.State != pb.DeliveryState_DELIVERY_STATE_SUCCEEDED {
			v.violate("after the redelivery, %s v%d is %s", g.user, r.Version, r.State)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		if !h.acked[e.ID] {
			v.violate("after the redelivery, %s has no 2xx of %s v%d", h.name, g.user, e.Version)
		}
	}
	return res.Msg.Count
}

// checkCoverage checks that the faults happened: 500s answered, attempts
// timed out, an attempt refused while a receiver was down and deliveries
// to it once back, a dispatcher killed while it delivered, and both racing
// dispatchers made attempts.
func (f *webhookFaults) checkCoverage(hooks []*hook, dispatchers []*dispatcher, v *verdict) {
	flaky, slow, down := hooks[0], hooks[1], hooks[2]
	flaky.mu.Lock()
	slow.mu.Lock()
	if flaky.answered500 == 0 || slow.timedOut == 0 {
		v.violate("no fault of the receivers: %d answered 500, %d attempts timed out", flaky.answered500, slow.timedOut)
	}
	slow.mu.Unlock()
	flaky.mu.Unlock()
	if down.ackedCount() <= f.ackedBeforeBack {
		v.violate("%s acknowledged nothing once back (%d before)", down.name, f.ackedBeforeBack)
	}
	if f.atKill.InFlight == 0 {
		v.violate("the dispatcher was killed with nothing in flight: %+v", f.atKill)
	}
	for _, d := range dispatchers {
		if d == f.killed {
			continue
		}
		if st, err := d.status(); err != nil || st.Attempts == 0 {
			v.violate("the dispatcher that was not killed made no attempt (%v): no race", err)
		}
	}
}

// summary is the webhook test's report: the load, what each receiver got,
// the dispatchers' own counts, the faults and the checks' results.
func (f *webhookFaults) summary(hooks []*hook, dispatchers []*dispatcher, entries map[string][]ledger.Entry, failed map[*hook]map[string]map[int64]*pb.WebhookDelivery,
	repeats map[*hook]int, g *gap, redelivered int64, l *load, v *verdict) string {
	var b strings.Builder
	n := 0
	for _, es := range entries {
		n += len(es)
	}
	fmt.Fprintf(&b, "webhooks: %d requests (%d acknowledged) by %d clients in %s; %d entries of %d users\n",
		len(l.book), l.acked.Load(), webhookRun().workers, l.took.Round(time.Second), n, len(entries))
	for _, h := range hooks {
		rows := 0
		for _, byVersion := range failed[h] {
			rows += len(byVersion)
		}
		h.mu.Lock()
		fmt.Fprintf(&b, "  %-14s %v: %d requests, %d events acknowledged, %d acknowledged again before the redelivery (the same webhook-id), %d answered 500, %d timed out, %d with another refunded_amount than the event's first; %d FAILED rows before the redelivery\n",
			h.name, h.types, len(h.log), len(h.acked), repeats[h], h.answered500, h.timedOut, h.refunded, rows)
		h.mu.Unlock()
	}
	fmt.Fprintf(&b, "dispatcher %s SIGKILLed with %d queues in flight, after %d attempts; the refused attempt at the receiver while down: %s v%d (%s)\n",
		f.atKill.Owner, f.atKill.InFlight, f.atKill.Attempts, f.refusedWhileDown.UserId, f.refusedWhileDown.Version, f.refusedWhileDown.LastError)
	for _, d := range dispatchers {
		if st, err := d.status(); err == nil {
			fmt.Fprintf(&b, "dispatcher %s at the end: %d entries applied, %d attempts, %d delivered, %d FAILED\n", st.Owner, st.EntriesApplied, st.Attempts, st.Delivered, st.Failed)
		}
	}
	fmt.Fprintf(&b, "the gap: %s v%v FAILED, then %d events redelivered; %d violations", g.user, g.versions, redelivered, v.n)
	return b.String()
}

// entriesOf is how many entries user has (its account's version), or 0 if
// ledgerd does not say.
func entriesOf(client pointledgerv1connect.LedgerServiceClient, user string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		return 0
	}
	return res.Msg.Version
}

// repeats counts the requests answered 2xx of an event already answered
// 2xx: at least once, the same webhook-id again.
func (h *hook) repeats() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.log {
		if a.acked() {
			n++
		}
	}
	return n - len(h.acked)
}
