package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// recordingDialer records every address it is asked to dial and connects
// only inside 127.0.0.0/8; anything else it refuses without a packet
// sent. A test that reaches it with another address has already failed:
// the policy should have refused first.
type recordingDialer struct {
	mu     sync.Mutex
	dialed []string
}

func (d *recordingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Is4() || ap.Addr().As4()[0] != 127 {
		return nil, fmt.Errorf("test dialer: refused %q: tests stay inside 127.0.0.0/8", address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *recordingDialer) Dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// receiver is an httptest server on 127.0.0.1 that verifies what it gets
// with the package's Verify, as a customer's receiver would.
type receiver struct {
	srv      *httptest.Server
	secrets  []Secret
	now      time.Time
	mu       sync.Mutex
	got      []delivered
	requests atomic.Int32
}

type delivered struct {
	id, contentType string
	body            []byte
	verifyErr       error
}

func newReceiver(t *testing.T, secrets []Secret, now time.Time) *receiver {
	t.Helper()
	r := &receiver{secrets: secrets, now: now}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		verr := Verify(r.secrets, req.Header, body, r.now, DefaultTolerance)
		r.mu.Lock()
		r.got = append(r.got, delivered{id: req.Header.Get(HeaderID), contentType: req.Header.Get("Content-Type"), body: body, verifyErr: verr})
		r.mu.Unlock()
		if verr != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) port() string {
	_, port, _ := net.SplitHostPort(r.srv.Listener.Addr().String())
	return port
}

func (r *receiver) deliveries() []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

var loopbackOnly = URLPolicy{AllowHTTP: true, AllowLoopback: true}

func TestSendDeliversSignedEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	oldSecret, newSecret := NewSecret(), NewSecret()
	// The receiver still knows only the old secret: mid-rotation, both sign.
	rcv := newReceiver(t, []Secret{oldSecret}, at)
	body, err := Body(ledger.EventPointsGranted, at, []byte(`{"event_id":"01JDX","user_id":"alice","version":"1","entry":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resolver := resolves(map[string][]string{"receiver.test": {"127.0.0.1"}})
	dialer := &recordingDialer{}
	policy := loopbackOnly
	policy.Resolver = resolver
	s := NewSender(Options{Policy: policy, Dialer: dialer, Now: func() time.Time { return at }})

	for _, url := range []string{rcv.srv.URL + "/hook", "http://receiver.test:" + rcv.port() + "/hook"} {
		if err := policy.Check(context.Background(), url); err != nil {
			t.Fatalf("Check(%s): %v", url, err)
		}
		a := s.Send(context.Background(), url, []Secret{newSecret, oldSecret}, Message{ID: "01JDX", Body: body})
		if !a.Delivered() || a.Err != nil || a.StatusCode != http.StatusNoContent {
			t.Fatalf("Send(%s) = %+v, want delivered (204)", url, a)
		}
	}
	got := rcv.deliveries()
	if len(got) != 2 {
		t.Fatalf("the receiver got %d deliveries, want 2", len(got))
	}
	for _, d := range got {
		if d.verifyErr != nil || d.id != "01JDX" || d.contentType != "application/json" || string(d.body) != string(body) {
			t.Errorf("the receiver got id %q, %s, %s: verify %v", d.id, d.contentType, d.body, d.verifyErr)
		}
	}
	want := "127.0.0.1:" + rcv.port()
	for _, addr := range dialer.Dialed() {
		if addr != want {
			t.Errorf("dialed %s, want only %s", addr, want)
		}
	}
	if !slices.Contains(resolver.Asked(), "receiver.test") {
		t.Errorf("the client resolved %q, not through the policy's resolver", resolver.Asked())
	}
}

// Every refused destination is refused before the dialer is called: no
// connection is attempted, and nothing outside 127.0.0.0/8 ever could be.
func TestSendRefusesDisallowedDestinations(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, []Secret{NewSecret()}, time.Now())
	tests := []struct {
		name string
		url  string
	}{
		{name: "private", url: "http://10.0.0.1/hook"},
		{name: "metadata service", url: "http://169.254.169.254/latest/meta-data/"},
		{name: "loopback v6", url: "http://[::1]:" + rcv.port() + "/hook"},
		{name: "loopback v4, not allowed", url: rcv.srv.URL + "/hook"},
		{name: "name resolving to private", url: "http://internal.test/hook"},
		{name: "name resolving to loopback", url: "http://localhost:" + rcv.port() + "/hook"},
		{name: "name resolving to mapped metadata", url: "http://mapped.test/hook"},
		{name: "name resolving to public and metadata", url: "http://mixed.test/hook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dialer := &recordingDialer{}
			s := NewSender(Options{Dialer: dialer, Policy: URLPolicy{AllowHTTP: true, Resolver: resolves(map[string][]string{
				"internal.test": {"10.0.0.1"},
				"localhost":     {"127.0.0.1"},
				"mapped.test":   {"::ffff:169.254.169.254"},
				"mixed.test":    {public, "169.254.169.254"},
			})}})
			a := s.Send(context.Background(), tt.url, []Secret{NewSecret()}, Message{ID: "01JDX", Body: []byte(`{}`)})
			if a.Delivered() || a.StatusCode != 0 || ledger.ReasonOf(a.Err) != ledger.ReasonEndpointURLNotAllowed {
				t.Errorf("Send = %+v, want refused with %s", a, ledger.ReasonEndpointURLNotAllowed)
			}
			if d := dialer.Dialed(); len(d) != 0 {
				t.Errorf("the dialer was asked for %q", d)
			}
		})
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Errorf("the receiver on 127.0.0.1 got %d requests with loopback not allowed", n)
	}
}

// DNS rebinding: a name that resolved to a public address when the
// endpoint was checked resolves to the metadata service at delivery. The
// address dialed is checked, not the one seen earlier.
func TestSendChecksTheAddressItDials(t *testing.T) {
	t.Parallel()
	resolver := resolves(nil).then("rebind.test", public).then("rebind.test", "169.254.169.254")
	policy := URLPolicy{Resolver: resolver}
	if err := policy.Check(context.Background(), "https://rebind.test/hook"); err != nil {
		t.Fatalf("Check while it resolves to a public address: %v", err)
	}
	dialer := &recordingDialer{}
	s := NewSender(Options{Policy: policy, Dialer: dialer})
	a := s.Send(context.Background(), "https://rebind.test/hook", []Secret{NewSecret()}, Message{ID: "01JDX", Body: []byte(`{}`)})
	if ledger.ReasonOf(a.Err) != ledger.ReasonEndpointURLNotAllowed {
		t.Errorf("Send = %+v, want refused with %s", a, ledger.ReasonEndpointURLNotAllowed)
	}
	if d := dialer.Dialed(); len(d) != 0 {
		t.Errorf("the dialer was asked for %q", d)
	}
	if asked := resolver.Asked(); len(asked) != 2 {
		t.Errorf("resolved %q, want rebind.test twice: at the check and at the dial", asked)
	}
}

// A redirect is the attempt's answer, never followed: not to the metadata
// service, not even to the same allowed server.
func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/to-self", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resolver := resolves(nil)
	dialer := &recordingDialer{}
	policy := loopbackOnly
	policy.Resolver = resolver
	s := NewSender(Options{Policy: policy, Dialer: dialer})
	for path, code := range map[string]int{"/to-metadata": http.StatusFound, "/to-self": http.StatusTemporaryRedirect} {
		a := s.Send(context.Background(), srv.URL+path, []Secret{NewSecret()}, Message{ID: "01JDX", Body: []byte(`{}`)})
		if a.Err != nil || a.StatusCode != code || a.Delivered() {
			t.Errorf("Send(%s) = %+v, want the %d itself, not delivered", path, a, code)
		}
	}
	for _, addr := range dialer.Dialed() {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("dialed %s", addr)
		}
	}
	if asked := resolver.Asked(); len(asked) != 0 {
		t.Errorf("resolved %q: a redirect was followed", asked)
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("/elsewhere got %d requests", n)
	}
}

func TestSendStatuses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		_, _ = fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		w.WriteHeader(code)
		// A long answer: read up to the limit and dropped.
		_, _ = w.Write([]byte(strings.Repeat("x", 3*MaxResponseBytes)))
	}))
	t.Cleanup(srv.Close)
	s := NewSender(Options{Policy: loopbackOnly, Dialer: &recordingDialer{}})
	tests := []struct {
		code            int
		delivered, gone bool
	}{
		{code: 200, delivered: true},
		{code: 202, delivered: true},
		{code: 299, delivered: true},
		{code: 304},
		{code: 400},
		{code: 410, gone: true},
		{code: 429},
		{code: 500},
		{code: 503},
	}
	for _, tt := range tests {
		a := s.Send(context.Background(), fmt.Sprintf("%s/%d", srv.URL, tt.code), []Secret{NewSecret()}, Message{ID: "01JDX", Body: []byte(`{}`)})
		if a.Err != nil || a.StatusCode != tt.code || a.Delivered() != tt.delivered || a.Gone() != tt.gone {
			t.Errorf("answer %d: %+v, delivered %v, gone %v; want delivered %v, gone %v", tt.code, a, a.Delivered(), a.Gone(), tt.delivered, tt.gone)
		}
	}
}

// An attempt the receiver does not answer ends at the timeout. What is
// asserted is that it ends, with a timeout error; not how fast.
func TestSendTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := NewSender(Options{Policy: loopbackOnly, Dialer: &recordingDialer{}, Timeout: 100 * time.Millisecond})
	a := s.Send(context.Background(), srv.URL, []Secret{NewSecret()}, Message{ID: "01JDX", Body: []byte(`{}`)})
	var netErr net.Error
	if a.Delivered() || !errors.As(a.Err, &netErr) || !netErr.Timeout() {
		t.Errorf("Send = %+v, want a timeout", a)
	}
}

func TestSendRefusesBadMessages(t *testing.T) {
	t.Parallel()
	dialer := &recordingDialer{}
	s := NewSender(Options{Policy: loopbackOnly, Dialer: dialer})
	ok := Message{ID: "01JDX", Body: []byte(`{}`)}
	for name, a := range map[string]Attempt{
		"no secret":        s.Send(context.Background(), "http://127.0.0.1:1/", nil, ok),
		"id with a stop":   s.Send(context.Background(), "http://127.0.0.1:1/", []Secret{NewSecret()}, Message{ID: "a.b", Body: ok.Body}),
		"empty id":         s.Send(context.Background(), "http://127.0.0.1:1/", []Secret{NewSecret()}, Message{Body: ok.Body}),
		"scheme":           s.Send(context.Background(), "ftp://127.0.0.1:1/", []Secret{NewSecret()}, ok),
		"userinfo":         s.Send(context.Background(), "http://u:p@127.0.0.1:1/", []Secret{NewSecret()}, ok),
		"https not forced": NewSender(Options{Dialer: dialer}).Send(context.Background(), "http://127.0.0.1:1/", []Secret{NewSecret()}, ok),
	} {
		if a.Err == nil || a.Delivered() {
			t.Errorf("%s: %+v, want an error", name, a)
		}
	}
	if d := dialer.Dialed(); len(d) != 0 {
		t.Errorf("the dialer was asked for %q", d)
	}
}

// The default dialer checks the socket's address once more, as the kernel
// is about to connect (called here directly: nothing is dialed).
func TestDialControl(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		policy  URLPolicy
		address string
		ok      bool
	}{
		{policy: URLPolicy{}, address: "10.0.0.1:443"},
		{policy: URLPolicy{}, address: "169.254.169.254:80"},
		{policy: URLPolicy{}, address: "[::1]:443"},
		{policy: URLPolicy{}, address: "127.0.0.1:443"},
		{policy: URLPolicy{}, address: "not-an-address:443"},
		{policy: URLPolicy{}, address: public + ":443", ok: true},
		{policy: loopbackOnly, address: "127.0.0.1:443", ok: true},
	} {
		err := tt.policy.control("tcp", tt.address, nil)
		if tt.ok != (err == nil) {
			t.Errorf("control(%s) with %+v = %v, want ok %v", tt.address, tt.policy, err, tt.ok)
		}
	}
}

// With no dialer given, the client dials with a net.Dialer, to 127.0.0.1
// only here, with loopback allowed.
func TestSendWithTheDefaultDialer(t *testing.T) {
	t.Parallel()
	at := time.Now()
	secret := NewSecret()
	rcv := newReceiver(t, []Secret{secret}, at)
	s := NewSender(Options{Policy: loopbackOnly, Now: func() time.Time { return at }})
	if a := s.Send(context.Background(), rcv.srv.URL, []Secret{secret}, Message{ID: "01JDX", Body: []byte(`{}`)}); !a.Delivered() {
		t.Errorf("Send = %+v, want delivered", a)
	}
}

// drain reads no more than MaxResponseBytes of an endless body.
func TestDrainStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	var endless countingReader
	drain(&endless)
	if endless.n != MaxResponseBytes {
		t.Errorf("drain read %d bytes, want %d", endless.n, MaxResponseBytes)
	}
}

type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n += len(p)
	return len(p), nil
}
