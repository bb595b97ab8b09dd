package affinity_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/servetest"
)

// instance is one ledgerd of a test cluster: the API behind auth on a
// memory store of its own (which of them committed a call is which store
// has it), with its view of the peers and affinity's forwarder, as `ledgerd
// serve` wires them.
type instance struct {
	url   string
	srv   *servetest.Server
	peers *affinity.Peers
	seen  *observer
	ready atomic.Bool  // what its health endpoint says of DynamoDB
	stall atomic.Int64 // > 0: calls it receives wait for their deadline, this many times
}

// clusterOptions say how a cluster differs from the plain one.
type clusterOptions struct {
	timeout time.Duration // forwarding's; 0: a minute, which only bounds a hang
	extra   []string      // more members, not of the cluster
	// insecure: no authentication (-insecure-dev), and no peer token.
	insecure bool
}

// cluster starts n instances that know each other, and checks their
// health once, so that each sees every other live.
func cluster(t *testing.T, n int, creds auth.DevCredentials, o clusterOptions) []*instance {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = time.Minute
	}
	var mu sync.Mutex
	urls := slices.Clone(o.extra)
	members := func(context.Context) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(urls)
		slices.Sort(out)
		return out, nil
	}
	out := make([]*instance, n)
	for i := range out {
		authn, err := auth.NewAuthenticator(creds.Credentials)
		if err != nil {
			t.Fatal(err)
		}
		token := creds.PeerToken
		if o.insecure {
			authn, token = auth.InsecureDev(), ""
		}
		in := &instance{seen: &observer{}}
		in.ready.Store(true)
		in.peers = affinity.New(affinity.Options{Members: members, Interval: time.Hour, Timeout: o.timeout, Token: token, Observer: in.seen})
		ready := func(context.Context) error {
			if !in.ready.Load() {
				return errors.New("DynamoDB does not answer")
			}
			return nil
		}
		in.srv = servetest.New(t, servetest.Options{
			Auth:         authn,
			Interceptors: []connect.Interceptor{in.stalls(), in.peers.Forwarder()},
			Routes:       map[string]http.Handler{"GET " + affinity.HealthPath: in.peers.Handler(authn.PeerOnly, ready)},
		})
		in.url = in.srv.URL
		out[i] = in
	}
	mu.Lock()
	for _, in := range out {
		urls = append(urls, in.url)
	}
	mu.Unlock()
	for _, in := range out {
		in.peers.Check(context.Background())
	}
	return out
}

// pair starts two instances, a and b, and returns them with their
// credentials and a user that b owns.
func pair(t *testing.T, o clusterOptions) (a, b *instance, creds auth.DevCredentials, user string) {
	t.Helper()
	creds = auth.GenerateDev()
	c := cluster(t, 2, creds, o)
	return c[0], c[1], creds, ownedBy(t, c[0], c[1].url)
}

// stalls makes a call wait for its deadline while stall is above 0: an
// owner too slow to answer in time.
func (in *instance) stalls() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if in.stall.Add(-1) >= 0 {
				<-ctx.Done()
				return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
			return next(ctx, req)
		}
	}
}

// observer counts what an instance's forwarder says.
type observer struct {
	mu        sync.Mutex
	forwarded map[string]int // by procedure
	failed    map[string]int // by reason
	fellBack  int
}

func (o *observer) Forwarded(procedure string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.forwarded == nil {
		o.forwarded = map[string]int{}
	}
	o.forwarded[procedure]++
}

func (o *observer) ForwardFailed(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == nil {
		o.failed = map[string]int{}
	}
	o.failed[reason]++
}

func (o *observer) FellBack(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fellBack++
}

// counts are what o saw: calls forwarded and answered, failures by
// reason, fallbacks.
func (o *observer) counts() (forwarded int, failed map[string]int, fellBack int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.forwarded {
		forwarded += n
	}
	failed = map[string]int{}
	for r, n := range o.failed {
		failed[r] = n
	}
	return forwarded, failed, o.fellBack
}

var _ affinity.Observer = (*observer)(nil)

// ownedBy returns a user that peer owns in in's view.
func ownedBy(t *testing.T, in *instance, peer string) string {
	t.Helper()
	for i := range 1000 {
		u := "user" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if owner, _ := in.peers.Owner(u); owner == peer {
			return u
		}
	}
	t.Fatalf("no user of %s in 1000", peer)
	return ""
}
