// Command webhook-receiver receives pointledger's webhooks as an integrator
// would: it verifies each delivery with the Standard Webhooks Go library
// (github.com/standard-webhooks/standard-webhooks/libraries/go), answers
// 2xx only to a delivery that verifies (401 otherwise), treats a webhook-id
// it has already received as a retry, and checks that each user's events
// arrive in version order with no gap. It prints a line per delivery: the
// user, the version, the type, and what it noticed: a duplicate (a retry, or
// a redelivery of an event it has), a GAP, a version that fills one, a
// backfill of versions older than the first it received (a redelivery from
// before the endpoint), or a version OUT OF ORDER (one that already came as
// another event).
//
// It reads the endpoint's secret, the whsec_ value CreateWebhookEndpoint
// showed, from WEBHOOK_SECRET, and listens on 127.0.0.1:9000 unless
// -listen (or WEBHOOK_LISTEN) says otherwise:
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/go/webhook-receiver
//
// It keeps what it has seen in memory, for as long as it runs: a receiver
// of your own would keep the webhook-ids and each user's last version with
// the work the event causes, in one transaction.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const (
	defaultListen = "127.0.0.1:9000"
	// maxBody bounds what a delivery may send; an event is a few KB.
	maxBody = 1 << 20
	// noticeType is the one event outside a user's version order: it
	// carries the version it was decided at, not a version of its own.
	noticeType = "points.expiring"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("webhook-receiver", flag.ContinueOnError)
	listen := fs.String("listen", cmp.Or(getenv("WEBHOOK_LISTEN"), defaultListen), "address to listen on (WEBHOOK_LISTEN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rec, err := newReceiver(getenv("WEBHOOK_SECRET"), stdout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// receiver is the webhook endpoint: an http.Handler.
type receiver struct {
	wh  *standardwebhooks.Webhook
	out io.Writer

	mu    sync.Mutex
	seen  map[string]bool      // webhook-ids answered 2xx
	users map[string]*sequence // by user id
}

// newReceiver checks the secret's form before the library decodes it: the
// library takes any base64, and an empty or mistyped secret would verify
// nothing, silently.
func newReceiver(secret string, out io.Writer) (*receiver, error) {
	if !strings.HasPrefix(secret, "whsec_") {
		return nil, errors.New("WEBHOOK_SECRET is not set to a whsec_ secret: set it to the secret CreateWebhookEndpoint showed")
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, errors.New("WEBHOOK_SECRET is not whsec_ and base64")
	}
	return &receiver{wh: wh, out: out, seen: map[string]bool{}, users: map[string]*sequence{}}, nil
}

// event is what the receiver reads of a delivery's body:
// {"type", "timestamp", "data": {"event_id", "user_id", "version", ...}}.
type event struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		EventID string  `json:"event_id"`
		UserID  string  `json:"user_id"`
		Version version `json:"version"`
	} `json:"data"`
}

// version reads the event's version: a decimal string in every event, as
// protojson writes an int64 such as the entry's version.
type version int64

func (v *version) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err != nil {
		return fmt.Errorf("version %s: not a string", b)
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return fmt.Errorf("version %s: not an integer", b)
	}
	*v = version(n)
	return nil
}

func (rec *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "body too large or cut short", http.StatusRequestEntityTooLarge)
		return
	}
	// Verify checks the signature against the exact bytes received, and
	// that webhook-timestamp is within 5 minutes of now (a replayed old
	// delivery is refused).
	if err := rec.wh.Verify(body, r.Header); err != nil {
		fmt.Fprintf(rec.out, "refused a delivery: %v\n", err)
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type == "" || ev.Data.UserID == "" {
		// Signed by the ledger but not an event this receiver knows: 400,
		// so that the ledger records the failure and it shows.
		fmt.Fprintf(rec.out, "refused a delivery: not an event: %v\n", err)
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	rec.receive(r.Header.Get(standardwebhooks.HeaderWebhookID), ev)
	w.WriteHeader(http.StatusNoContent)
}

// receive records a verified event and prints what it makes of it, under
// the lock, so that the lines come in the order the events were judged.
func (rec *receiver) receive(id string, ev event) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	fmt.Fprintln(rec.out, rec.judge(id, ev))
}

// judge records a verified event and says what it makes of it.
func (rec *receiver) judge(id string, ev event) string {
	line := fmt.Sprintf("%s version %d %s", ev.Data.UserID, ev.Data.Version, ev.Type)
	if rec.seen[id] {
		// The ledger sends an event again, under the same webhook-id,
		// until it gets a 2xx, and again when it is redelivered; the
		// receiver answers 2xx and acts once.
		return line + ": duplicate of webhook-id " + id + ", already received"
	}
	rec.seen[id] = true
	if ev.Type == noticeType {
		return line + " (a notice: outside the version order)"
	}
	s, ok := rec.users[ev.Data.UserID]
	if !ok {
		// The first event seen of a user starts its sequence: an endpoint
		// receives only the entries written after it was created.
		s = &sequence{first: int64(ev.Data.Version), last: int64(ev.Data.Version) - 1, ids: map[int64]string{}}
		rec.users[ev.Data.UserID] = s
	}
	return line + s.next(int64(ev.Data.Version), id)
}

// sequence is one user's versions as received: the first and the highest,
// and the webhook-id each version came under.
type sequence struct {
	first, last int64
	ids         map[int64]string
}

// next records version v, which came as webhook-id id (not a duplicate),
// and returns what it makes of it:
//   - nothing when v follows the last;
//   - GAP when versions were skipped: the ledger gave up on them, and they
//     come when redelivered;
//   - a fill, when v is a version skipped earlier;
//   - a backfill, when v is older than the first version received: a
//     redelivery from a version or a time before the endpoint was created
//     (RedeliverWebhookEvents with from_version or start_time) sends the
//     user's older entries, in order, before the ones already received
//     come again under their own webhook-ids;
//   - OUT OF ORDER when v already came under another webhook-id: two
//     events claim one version, which no retry or redelivery makes.
func (s *sequence) next(v int64, id string) string {
	if other, ok := s.ids[v]; ok {
		return fmt.Sprintf(" OUT OF ORDER: version %d already came, as webhook-id %s", v, other)
	}
	s.ids[v] = id
	switch {
	case v == s.last+1:
		s.last = v
		return ""
	case v > s.last+1:
		skipped := fmt.Sprintf("GAP: version %d missing", s.last+1)
		if v-s.last > 2 {
			skipped = fmt.Sprintf("GAP: versions %d to %d missing", s.last+1, v-1)
		}
		s.last = v
		return " " + skipped
	case v > s.first:
		return fmt.Sprintf(" (fills the GAP below version %d)", s.last)
	default:
		return fmt.Sprintf(" (a backfill: older than version %d, the first received)", s.first)
	}
}
