package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Dialer opens connections; *net.Dialer is one. Tests inject one that
// records what it is asked and refuses anything outside 127.0.0.0/8.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

const (
	// DefaultAttemptTimeout bounds one attempt, connection to last byte
	// read; Standard Webhooks recommends 15 to 30 s.
	DefaultAttemptTimeout = 15 * time.Second
	// MaxResponseBytes is what an attempt reads of a response body before
	// dropping it: a receiver's answer is its status; the body only lets
	// the connection be reused, and must not cost the dispatcher memory.
	MaxResponseBytes       = 64 << 10
	maxResponseHeaderBytes = 16 << 10
)

// Options configure the delivery client.
type Options struct {
	// Policy is checked on the URL at each attempt, and on every address
	// dialed, after resolution: a host that resolved to a public address
	// when its endpoint was created may resolve to a private one now (DNS
	// rebinding). Its Resolver is the one the client resolves with.
	Policy URLPolicy
	// Dialer connects to the addresses the policy allowed; nil is a
	// net.Dialer that checks the policy once more on the socket's address.
	Dialer Dialer
	// Timeout bounds one attempt; 0 is DefaultAttemptTimeout.
	Timeout time.Duration
	// Now is the clock of webhook-timestamp; nil is time.Now.
	Now func() time.Time
	// IdleConnsPerHost is how many idle connections to one receiver are
	// kept for the next attempts; 0 is DefaultIdleConnsPerHost. The
	// dispatcher makes up to its per-endpoint limit of attempts at once:
	// with fewer kept, the connections of each burst above it are closed
	// and dialed again at the next.
	IdleConnsPerHost int
}

// DefaultIdleConnsPerHost is the dispatcher's default of attempts at once
// to one endpoint (dispatch.DefaultPerEndpoint).
const DefaultIdleConnsPerHost = 16

func (o Options) idleConnsPerHost() int {
	if o.IdleConnsPerHost > 0 {
		return o.IdleConnsPerHost
	}
	return DefaultIdleConnsPerHost
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultAttemptTimeout
}

// NewClient returns the HTTP client deliveries go through. It resolves
// hosts itself and dials only addresses the policy allows, by address, so
// the check is on what is actually dialed; it uses no proxy (the proxy
// would be what is dialed, not the endpoint); it never follows a redirect
// (the attempt's result is the 3xx: a redirect could point anywhere, and
// Standard Webhooks counts it a failure); and it gives up on an attempt
// after the timeout.
func NewClient(o Options) *http.Client {
	dialer := o.Dialer
	if dialer == nil {
		dialer = &net.Dialer{Timeout: o.timeout(), KeepAlive: 30 * time.Second, Control: o.Policy.control}
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            policyDialer{policy: o.Policy, dialer: dialer}.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    o.timeout(),
		ResponseHeaderTimeout:  o.timeout(),
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		MaxIdleConnsPerHost:    o.idleConnsPerHost(),
		IdleConnTimeout:        90 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: o.timeout(),
	}
}

// policyDialer resolves a host with the policy's resolver and dials its
// addresses, refusing them all if the policy refuses one.
type policyDialer struct {
	policy URLPolicy
	dialer Dialer
}

func (d policyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	portNum, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: port: %w", address, err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = d.policy.resolver().LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("dial %s: resolve: %w", address, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("dial %s: no address", address)
	}
	for _, a := range addrs {
		if err := d.policy.CheckAddr(a); err != nil {
			return nil, fmt.Errorf("dial %s: %w", address, err)
		}
	}
	var errs []error
	for _, a := range addrs {
		conn, err := d.dialer.DialContext(ctx, network, netip.AddrPortFrom(a.WithZone(""), uint16(portNum)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", address, errors.Join(errs...))
}

// control checks the address a socket is about to connect to: the last
// word, should anything reach the default dialer with a name.
func (p URLPolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refuse("dialing %q, not an address", clip(address))
	}
	return p.CheckAddr(ap.Addr())
}

// Message is one event as it is sent: its id (webhook-id, the same on
// every attempt) and its body (Body).
type Message struct {
	ID   string
	Body []byte
}

// Attempt is the outcome of one delivery attempt.
type Attempt struct {
	// StatusCode is the response's; 0 if none came.
	StatusCode int
	// Err says why no response came: the URL or an address refused, the
	// receiver unreachable, the timeout.
	Err error
}

// Delivered says whether the receiver took the event (a 2xx).
func (a Attempt) Delivered() bool {
	return a.Err == nil && a.StatusCode >= 200 && a.StatusCode <= 299
}

// Gone says whether the receiver asked for no more events (410): the
// endpoint is to be disabled.
func (a Attempt) Gone() bool { return a.Err == nil && a.StatusCode == http.StatusGone }

// Sender makes delivery attempts.
type Sender struct {
	client *http.Client
	policy URLPolicy
	now    func() time.Time
}

// NewSender returns a Sender whose attempts go through NewClient(o).
func NewSender(o Options) *Sender {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Sender{client: NewClient(o), policy: o.Policy, now: now}
}

// Send makes one attempt to deliver m to endpointURL, signed with every
// secret (two during a rotation), timestamped now. The URL is checked
// against the policy again, and every address dialed; the response body is
// read up to MaxResponseBytes and dropped.
func (s *Sender) Send(ctx context.Context, endpointURL string, secrets []Secret, m Message) Attempt {
	if _, err := s.policy.checkStatic(endpointURL); err != nil {
		return Attempt{Err: err}
	}
	if len(secrets) == 0 {
		return Attempt{Err: errors.New("send: no secret to sign with")}
	}
	if m.ID == "" || strings.ContainsAny(m.ID, ". \t\r\n") {
		// A full stop would make id.timestamp.body ambiguous.
		return Attempt{Err: fmt.Errorf("send: message id %q is empty or has a full stop or space", clip(m.ID))}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpointURL, bytes.NewReader(m.Body))
	if err != nil {
		return Attempt{Err: fmt.Errorf("send: %w", err)}
	}
	// What SetHeaders and Header.Set make, under the keys Set gives them
	// (canonical), without canonicalizing them for every attempt.
	unix := s.now().Unix()
	req.Header["Content-Type"] = jsonContentType
	req.Header["User-Agent"] = userAgent
	req.Header["Webhook-Id"] = []string{m.ID}
	req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(unix, 10)}
	req.Header["Webhook-Signature"] = []string{string(appendSignatures(make([]byte, 0, len(secrets)*signatureLen), secrets, m.ID, unix, m.Body))}
	resp, err := s.client.Do(req)
	if err != nil {
		return Attempt{Err: fmt.Errorf("send: %w", err)}
	}
	drain(resp.Body)
	_ = resp.Body.Close()
	return Attempt{StatusCode: resp.StatusCode}
}

var (
	jsonContentType = []string{"application/json"}
	userAgent       = []string{"pointledger-webhook"}
)

// drain reads at most MaxResponseBytes of a response body, and drops it.
// What it reads lets a short body's connection be reused; a longer one is
// closed instead.
func drain(body io.Reader) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, MaxResponseBytes))
}
