package affinity_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/auth"
)

// live is who owns users in in's view: the owners of many users (none
// when no peer is live).
func live(in *instance) []string {
	var owners []string
	for i := range 300 {
		o, _ := in.peers.Owner("user-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		if o != "" && !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	slices.Sort(owners)
	return owners
}

func urls(ins ...*instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.url)
	}
	slices.Sort(out)
	return out
}

// Each instance finds itself among the members by the id its health
// endpoint answers, sees the others live while they are ready, and down
// while they are not ready or not there; every instance with the same
// view names the same owner.
func TestHealthChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := cluster(t, 3, auth.GenerateDev(), clusterOptions{})
	for _, in := range c {
		if l, d := in.peers.Count(); l != 3 || d != 0 {
			t.Fatalf("%s sees %d peers live and %d down, want 3 and 0", in.url, l, d)
		}
		if owner, remote := in.peers.Owner(ownedBy(t, in, in.url)); owner != in.url || remote {
			t.Errorf("%s: its own user is owned by %s (remote %v): it did not find itself", in.url, owner, remote)
		}
	}
	for i := range 200 {
		u := "u" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		a, _ := c[0].peers.Owner(u)
		b, _ := c[1].peers.Owner(u)
		if a != b || a != affinity.Owner(u, urls(c...)) {
			t.Fatalf("%s is owned by %s in one view and %s in another", u, a, b)
		}
	}

	// Not ready (its DynamoDB does not answer): its users go to the others.
	c[2].ready.Store(false)
	c[0].peers.Check(ctx)
	if got, want := live(c[0]), urls(c[0], c[1]); !slices.Equal(got, want) {
		t.Errorf("with %s not ready, owners %v, want %v", c[2].url, got, want)
	}
	c[2].ready.Store(true)
	c[0].peers.Check(ctx)
	if got, want := live(c[0]), urls(c...); !slices.Equal(got, want) {
		t.Errorf("with %s ready again, owners %v, want %v", c[2].url, got, want)
	}

	// Gone: its users go to the others until it comes back.
	c[1].srv.Close()
	c[0].peers.Check(ctx)
	if got, want := live(c[0]), urls(c[0], c[2]); !slices.Equal(got, want) {
		t.Errorf("with %s gone, owners %v, want %v", c[1].url, got, want)
	}
	if l, d := c[0].peers.Count(); l != 2 || d != 1 {
		t.Errorf("with %s gone: %d live and %d down, want 2 and 1", c[1].url, l, d)
	}
}

// A peer a forwarded call failed on is down at once, and live again once a
// health check passes.
func TestFailedUntilChecked(t *testing.T) {
	t.Parallel()
	c := cluster(t, 2, auth.GenerateDev(), clusterOptions{})
	c[0].peers.Failed(context.Background(), c[1].url, errors.New("connection refused"))
	if got, want := live(c[0]), urls(c[0]); !slices.Equal(got, want) {
		t.Errorf("after a failure, owners %v, want %v", got, want)
	}
	c[0].peers.Check(context.Background())
	if got, want := live(c[0]), urls(c...); !slices.Equal(got, want) {
		t.Errorf("after a check that passed, owners %v, want %v", got, want)
	}
	c[0].peers.Failed(context.Background(), "http://127.0.0.1:1", errors.New("not a member")) // nothing to mark
	if got, want := live(c[0]), urls(c...); !slices.Equal(got, want) {
		t.Errorf("after a failure of a stranger, owners %v, want %v", got, want)
	}
}

// Members that the name resolves to come and go (a headless Service as
// pods start and stop); an instance that is not among them owns no user.
func TestMembersComeAndGo(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	c := cluster(t, 3, creds, clusterOptions{})
	var mu sync.Mutex
	var listed []string
	var fail error
	outsider := affinity.New(affinity.Options{
		Members: func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(listed), fail
		},
		Interval: time.Hour, Timeout: time.Minute, Token: creds.PeerToken,
	})
	in := &instance{peers: outsider}
	for _, step := range []struct {
		listed []string
		fail   error
		want   []string
	}{
		{nil, nil, nil},
		{urls(c[0], c[1]), nil, urls(c[0], c[1])},
		{urls(c...), nil, urls(c...)},
		{urls(c[0], c[2]), nil, urls(c[0], c[2])},
		{nil, errors.New("DNS does not answer"), urls(c[0], c[2])}, // the last list stays
	} {
		mu.Lock()
		listed, fail = step.listed, step.fail
		mu.Unlock()
		outsider.Check(context.Background())
		if got := live(in); !slices.Equal(got, step.want) {
			t.Errorf("members %v (error %v): owners %v, want %v", step.listed, step.fail, got, step.want)
		}
		for i := range 50 {
			if _, remote := outsider.Owner(string(rune('a' + i))); !remote && len(step.want) > 0 {
				t.Fatalf("members %v: an instance that is not among them owns a user", step.listed)
			}
		}
	}
}

// The health endpoint answers peers only; to anyone else it is not there.
func TestHealthEndpointAnswersPeersOnly(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	c := cluster(t, 1, creds, clusterOptions{})
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusNotFound},
		{"a service", creds.ServiceToken, http.StatusNotFound},
		{"a peer", creds.PeerToken, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, c[0].url+affinity.HealthPath, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Instance string }
		_ = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != tc.want || tc.want == http.StatusOK && body.Instance != c[0].peers.ID() {
			t.Errorf("%s: HTTP %d, instance %q; want %d and, to a peer, %q", tc.name, res.StatusCode, body.Instance, tc.want, c[0].peers.ID())
		}
	}
}
