package affinity

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// HealthPath is where an instance answers its peers' health checks, on the
// API's port.
const HealthPath = "/peerz"

// Options say who the peers are and how they are reached.
type Options struct {
	// Members lists the instances, this one included (ParseMembers).
	Members Members
	// Self is this instance's base URL as its peers know it; "": the member
	// whose health check answers this instance's own id.
	Self string
	// Interval is the time between two rounds of health checks.
	Interval time.Duration
	// Timeout bounds a health check and a forwarded call (dialling within
	// it: at most DialTimeout).
	Timeout time.Duration
	// Token is the peer token sent to the peers; "" when they ask for none
	// (-insecure-dev).
	Token string
	// Observer counts forwarded calls, failures and fallbacks; nil: none.
	Observer Observer
	Log      *slog.Logger
	// Client reaches the peers; nil: HTTP/2 without TLS, one connection
	// per peer that every call shares (PeerClient).
	Client *http.Client
}

// Observer is told what forwarding does (package metrics implements it).
type Observer interface {
	// Forwarded: a mutation was sent to its user's owner, which answered
	// (a success or a refusal).
	Forwarded(procedure string)
	// ForwardFailed: the owner gave no answer, for reason (unreachable,
	// timeout or refused: it did not take the peer token).
	ForwardFailed(reason string)
	// FellBack: the mutation was then committed here.
	FellBack(procedure string)
}

// Reasons a forwarded call got no answer (Observer.ForwardFailed).
const (
	FailUnreachable = "unreachable"
	FailTimeout     = "timeout"
	FailRefused     = "refused"
)

// DialTimeout bounds connecting to a peer: on a network, a connection is
// made in milliseconds or the peer is gone.
const DialTimeout = 500 * time.Millisecond

// Peers is this instance's view of the deployment: who is live, and so who
// owns which user.
type Peers struct {
	o      Options
	id     string // this instance's, answered to health checks
	bearer string // the Authorization header of a call to a peer; "" without a token
	view   atomic.Pointer[view]

	mu       sync.Mutex
	self     string
	misnamed bool                  // -self was found to name another member; said once
	members  []string              // as last listed
	state    map[string]*peerState // by URL, self excluded
}

// view is what Owner reads, without a lock.
type view struct {
	self string   // "" until known
	live []string // sorted; self included, when it is a member
}

type peerState struct {
	live bool
	// failed is when a forwarded call to it last failed: a health check
	// begun before does not bring it back.
	failed  time.Time
	callers map[string]caller // by procedure
}

// New returns the view of the peers of o; Run keeps it current. Until the
// first round of checks, no peer is live and every mutation is committed
// here.
func New(o Options) *Peers {
	if o.Client == nil {
		o.Client = PeerClient(o.Timeout)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	p := &Peers{o: o, id: hex.EncodeToString(b), self: o.Self, state: map[string]*peerState{}}
	if o.Token != "" {
		p.bearer = "Bearer " + o.Token
	}
	p.view.Store(&view{self: o.Self})
	return p
}

// PeerClient is an HTTP client for peers: HTTP/2 without TLS (h2c, as
// ledgerd serves), so that all calls to a peer share one connection, with
// dialling bounded by DialTimeout and a connection that stops answering
// closed after timeout.
func PeerClient(timeout time.Duration) *http.Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &protocols,
		DialContext: (&net.Dialer{Timeout: min(DialTimeout, timeout), KeepAlive: 15 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 2 * timeout, // idle that long: ping
			PingTimeout:     timeout,     // no answer: the connection is closed
		},
	}}
}

// ID is this instance's id: random, new at each start.
func (p *Peers) ID() string { return p.id }

// Owner returns the owner of user among the live peers, and whether that is
// another instance (false: commit here, also when no peer is live).
func (p *Peers) Owner(user string) (peer string, remote bool) {
	v := p.view.Load()
	o := Owner(user, v.live)
	return o, o != "" && o != v.self
}

// Count returns how many members are live (this instance included) and
// how many are down.
func (p *Peers) Count() (live, down int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	live = len(p.view.Load().live)
	return live, len(p.members) - live
}

// Run checks the peers every Interval until ctx ends.
func (p *Peers) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	for {
		p.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checked is the answer of one peer's health check.
type checked struct {
	peer  string
	id    string // the instance that answered, if it did
	err   error  // not ready, or no answer
	start time.Time
}

// Check lists the members and checks each once, all at the same time. A
// peer is live while its last check passed; a member that answers this
// instance's id is this instance. Not safe to call concurrently with
// itself (Run calls it).
func (p *Peers) Check(ctx context.Context) {
	members, err := p.o.Members(ctx)
	p.mu.Lock()
	if err != nil {
		p.o.Log.WarnContext(ctx, "peers: listing them failed; the last list stays", "error", err)
		members = p.members
	}
	self := p.self
	p.mu.Unlock()
	results := make([]checked, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m == self {
			continue
		}
		wg.Go(func() {
			start := time.Now()
			id, err := p.probe(ctx, m)
			results[i] = checked{peer: m, id: id, err: err, start: start}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: what the checks say is only that
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = members
	for peer := range p.state {
		if !slices.Contains(members, peer) {
			delete(p.state, peer)
			p.o.Log.InfoContext(ctx, "peer left", "peer", peer)
		}
	}
	for _, r := range results {
		switch {
		case r.peer == "":
		case r.id == p.id:
			switch {
			case p.self == "":
				p.self = r.peer
				p.o.Log.InfoContext(ctx, "peers: this instance is "+r.peer, "peer", r.peer)
			case r.peer != p.self && !p.misnamed:
				// Another instance is taken for this one: both own its users.
				p.misnamed = true
				p.o.Log.WarnContext(ctx, "peers: this instance answers at "+r.peer+", not at -self "+p.self+" (LEDGER_SELF): "+
					"the instance at "+p.self+" is never checked, and its users are owned by both", "peer", r.peer, "self", p.self)
			}
		case r.err != nil:
			p.down(ctx, p.stateOf(r.peer), r.peer, r.err)
		case r.start.Before(p.stateOf(r.peer).failed):
			// A forwarded call failed while this check ran: the next check says.
		default:
			if s := p.stateOf(r.peer); !s.live {
				s.live = true
				p.o.Log.InfoContext(ctx, "peer up", "peer", r.peer, "instance", r.id)
			}
		}
	}
	p.publish()
}

func (p *Peers) stateOf(peer string) *peerState {
	s := p.state[peer]
	if s == nil {
		s = &peerState{callers: map[string]caller{}}
		p.state[peer] = s
	}
	return s
}

// down marks peer down; p.mu is held.
func (p *Peers) down(ctx context.Context, s *peerState, peer string, cause error) {
	if s.live {
		s.live = false
		p.o.Log.WarnContext(ctx, "peer down: its users are owned by others until its health check passes", "peer", peer, "error", cause)
	}
}

// publish makes the live peers the view; p.mu is held.
func (p *Peers) publish() {
	var live []string
	for _, m := range p.members {
		if m == p.self || p.state[m] != nil && p.state[m].live {
			live = append(live, m)
		}
	}
	p.view.Store(&view{self: p.self, live: live})
}

// Failed marks peer down after a forwarded call got no answer from it, until
// a health check begun later passes.
func (p *Peers) Failed(ctx context.Context, peer string, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.state[peer]
	if !ok {
		return
	}
	s.failed = time.Now()
	if s.live {
		p.down(ctx, s, peer, cause)
		p.publish()
	}
}

// health is what HealthPath answers.
type health struct {
	Instance string `json:"instance"`
}

// probe checks peer's health: its instance id, and an error unless it is
// ready.
func (p *Peers) probe(ctx context.Context, peer string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer+HealthPath, nil)
	if err != nil {
		return "", err
	}
	if p.bearer != "" {
		req.Header.Set("Authorization", p.bearer)
	}
	res, err := p.o.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var h health
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<10)).Decode(&h); err != nil {
		return "", fmt.Errorf("health check: HTTP %s", res.Status)
	}
	if res.StatusCode != http.StatusOK {
		return h.Instance, fmt.Errorf("health check: HTTP %s", res.Status)
	}
	return h.Instance, nil
}

// Handler answers the peers' health checks (GET HealthPath): this
// instance's id, with 200 while ready answers nil (DynamoDB answers) and
// 503 otherwise, so that the users of an instance that cannot commit go to
// the others. A caller that authorized refuses gets 404, as for any path
// the API does not serve: strangers learn nothing of the instance.
func (p *Peers) Handler(authorized func(*http.Request) bool, ready func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r) {
			http.NotFound(w, r)
			return
		}
		status := http.StatusOK
		ctx, cancel := context.WithTimeout(r.Context(), p.o.Timeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(health{Instance: p.id})
	})
}
