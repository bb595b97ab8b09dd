package ddbwire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// conns is ddbwire's own HTTP/1.1 client for its endpoint
// (Options.OwnConns): a stack of idle keep-alive connections, each with a
// bufio.Reader, on which the caller's goroutine writes a request and reads
// its answer. Its rules (keep-alive, the context's end, the one send again
// on a new connection, what it takes of the HTTP client) are in the
// package's doc.
type conns struct {
	addr, hostname   string
	dial             func(ctx context.Context, network, addr string) (net.Conn, error)
	tls              *tls.Config // nil: plain TCP
	handshakeTimeout time.Duration
	readTimeout      time.Duration // the SDK's rolling read timeout, 0: none
	timeout          time.Duration // the HTTP client's timeout of a request, 0: none
	idleTimeout      time.Duration
	maxIdle          int

	mu   sync.Mutex
	idle []*conn
}

// conn is one connection with its reader.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	idleSince time.Time
}

// transportOf is the *http.Transport behind an HTTP client ddbwire can take
// its settings from (the SDK's BuildableClient, an *http.Client), with the
// client's timeout and read timeout; ok false for any other Doer.
func transportOf(d Doer) (tr *http.Transport, timeout, readTimeout time.Duration, ok bool) {
	switch c := d.(type) {
	case *awshttp.BuildableClient:
		rt, _ := c.GetReadTimeout()
		return c.GetTransport(), c.GetTimeout(), rt, true
	case *http.Client:
		t := c.Transport
		if t == nil {
			t = http.DefaultTransport
		}
		tr, ok := t.(*http.Transport)
		return tr, c.Timeout, 0, ok
	}
	return nil, 0, 0, false
}

// errNoOwnConns says why the requests go through the HTTP client instead.
var errNoOwnConns = errors.New("ddbwire: no connections of its own")

// newConns is the client for endpoint u with the settings of d's transport;
// errNoOwnConns when d's settings are not known (a Doer of another kind),
// when its transport dials TLS itself, or when it sends requests to u
// through a proxy (HTTP_PROXY, HTTPS_PROXY): then d sends them.
func newConns(d Doer, u *url.URL) (*conns, error) {
	tr, timeout, readTimeout, ok := transportOf(d)
	if !ok || tr == nil {
		return nil, fmt.Errorf("%w: HTTP client %T", errNoOwnConns, d)
	}
	if tr.DialTLSContext != nil || tr.DialTLS != nil { //nolint:staticcheck // DialTLS: a transport may still set it
		return nil, fmt.Errorf("%w: its transport dials TLS itself", errNoOwnConns)
	}
	if tr.Proxy != nil {
		p, err := tr.Proxy(&http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}})
		if err != nil {
			return nil, fmt.Errorf("ddbwire: the proxy for %s: %w", u, err)
		}
		if p != nil {
			return nil, fmt.Errorf("%w: %s is reached through a proxy", errNoOwnConns, u.Host)
		}
	}
	c := &conns{
		hostname: u.Hostname(), handshakeTimeout: tr.TLSHandshakeTimeout,
		readTimeout: readTimeout, timeout: timeout, idleTimeout: tr.IdleConnTimeout,
		maxIdle: tr.MaxIdleConnsPerHost,
	}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if tr.TLSClientConfig != nil {
			c.tls = tr.TLSClientConfig.Clone()
		}
		if c.tls.ServerName == "" {
			c.tls.ServerName = c.hostname
		}
		c.tls.NextProtos = []string{"http/1.1"}
	default:
		return nil, fmt.Errorf("%w: scheme %q", errNoOwnConns, u.Scheme)
	}
	c.addr = net.JoinHostPort(c.hostname, port)
	c.dial = tr.DialContext
	if c.dial == nil {
		c.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if c.maxIdle <= 0 {
		c.maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	return c, nil
}

// take is an idle connection (reused true), or a new one.
func (c *conns) take(ctx context.Context) (cn *conn, reused bool, err error) {
	now := time.Now()
	c.mu.Lock()
	for len(c.idle) > 0 {
		cn = c.idle[len(c.idle)-1]
		c.idle[len(c.idle)-1] = nil
		c.idle = c.idle[:len(c.idle)-1]
		if c.idleTimeout > 0 && now.Sub(cn.idleSince) > c.idleTimeout {
			c.mu.Unlock()
			_ = cn.nc.Close()
			c.mu.Lock()
			continue
		}
		c.mu.Unlock()
		return cn, true, nil
	}
	c.mu.Unlock()
	cn, err = c.connect(ctx)
	return cn, false, err
}

// put makes cn idle, or closes it when maxIdle are.
func (c *conns) put(cn *conn) {
	cn.idleSince = time.Now()
	c.mu.Lock()
	if len(c.idle) < c.maxIdle {
		c.idle = append(c.idle, cn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	_ = cn.nc.Close()
}

// closeIdle closes the idle connections.
func (c *conns) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		_ = cn.nc.Close()
	}
}

// connect dials a new connection (and its TLS handshake).
func (c *conns) connect(ctx context.Context) (*conn, error) {
	nc, err := c.dial(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if c.tls != nil {
		hctx := ctx
		if c.handshakeTimeout > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, c.handshakeTimeout)
			defer cancel()
		}
		tc := tls.Client(nc, c.tls)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	if c.readTimeout > 0 {
		nc = &readTimeoutConn{Conn: nc, timeout: c.readTimeout}
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 4096)}, nil
}

// roundTrip writes req (a whole HTTP/1.1 request, head and body) and reads
// its answer, the body read to its end; on a reused connection that gave
// no answer as a server's closing it gives (the rules on conns), once more
// on a new one. A success that accept took as it came (quick.go) is
// answered nil, nil, nil: it has no *http.Response.
func (c *conns) roundTrip(ctx context.Context, req []byte, accept accepter) (*http.Response, []byte, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	cn, reused, err := c.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	resp, body, answered, err := c.exchange(ctx, cn, req, accept)
	if err == nil || !reused || answered || ctx.Err() != nil || !closedByPeer(err) {
		return resp, body, err
	}
	if cn, err = c.connect(ctx); err != nil {
		return nil, nil, err
	}
	resp, body, _, err = c.exchange(ctx, cn, req, accept)
	return resp, body, err
}

// exchange is one request on cn; cn goes back to the stack or is closed.
// answered says whether any byte of an answer came. A success whose head
// and body came whole in the reader's buffer, of the simple form every
// success of DynamoDB's has, goes to accept as it is, without
// http.ReadResponse (quickAnswer); one that accept does not take, and any
// other answer, is read by http.ReadResponse.
func (c *conns) exchange(ctx context.Context, cn *conn, req []byte, accept accepter) (resp *http.Response, body []byte, answered bool, err error) {
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = cn.nc.Close() })
	}
	keep := false
	defer func() {
		if stop != nil && !stop() {
			keep = false // closed by the context's end
		}
		if keep {
			c.put(cn)
		} else {
			_ = cn.nc.Close()
		}
	}()
	if _, err := cn.nc.Write(req); err != nil {
		return nil, nil, false, err
	}
	if _, err := cn.br.Peek(1); err != nil {
		return nil, nil, false, err
	}
	if q, ok := quickAnswer(cn.br); ok && accept.accepts(q) {
		_, _ = cn.br.Discard(q.size) // buffered: cannot fail
		keep = !q.close && cn.br.Buffered() == 0
		return nil, nil, true, nil
	}
	for {
		resp, err = http.ReadResponse(cn.br, nil)
		if err != nil {
			return nil, nil, true, err
		}
		// An interim answer (100 Continue, 103 Early Hints): the answer follows.
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	body, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, nil, true, fmt.Errorf("read the answer: %w", err)
	}
	resp.Body = http.NoBody
	keep = !resp.Close && cn.br.Buffered() == 0
	return resp, body, true, nil
}

// closedByPeer says whether err is what a write to, or a read from, a
// connection the server closed gives.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// readTimeoutConn is the SDK's read timeout (awshttp's deadlineConn): each
// read waits at most timeout for a byte.
type readTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

func (c *readTimeoutConn) Read(p []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &awshttp.ResponseTimeoutError{TimeoutDur: c.timeout}
	}
	return n, err
}
