package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

// A fleet is the ledgerd processes of one run: -instances of `ledgerd
// serve` on one DynamoDB, each on API and operations ports of its own, as
// production runs several behind a load balancer.
type fleet struct {
	Instances  []*Instance
	Token      string // a service token every instance accepts
	AdminToken string // an admin token every instance accepts (WebhookService, the campaign's budget)
}

// An Instance is one `ledgerd serve` of a fleet.
type Instance struct {
	Name   string // ledgerd-1, ledgerd-2, ...
	URL    string // its API
	OpsURL string // its operations listener: /metrics, /projection/status
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is gone and waited for
}

// FleetOptions say how to start a fleet.
type FleetOptions struct {
	Bin       string        // the ledgerd binary
	Instances int           // how many
	Affinity  bool          // each told of its peers, so that a user's mutations go to one owner
	Health    time.Duration // with affinity: how often the instances check each other (-peer-health-interval)
	Args      []string      // added to every serve's flags
}

// StartFleet migrates e's tables and starts o.instances ledgerd serve on
// them, on free ports, with one set of fresh credentials, and waits for
// each to be healthy.
func StartFleet(ctx context.Context, o FleetOptions, e *Env) (*fleet, error) {
	creds := auth.GenerateDev()
	environ := append(os.Environ(), e.ledgerdEnv()...)
	environ = append(environ, "LEDGER_LOG_LEVEL=warn", "LEDGER_AUTH_FILE=", "LEDGER_AUTH_JSON="+string(creds.Credentials.JSON()),
		"LEDGER_PEER_TOKEN="+creds.PeerToken, // what -peers needs; unused without
		// The campaign compares one budget item with k shards: a budget
		// keeps the shards it was created with.
		"LEDGER_BUDGET_GROWTH_THROTTLES=0")

	migrate := exec.CommandContext(ctx, o.Bin, "migrate")
	migrate.Env = environ
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ledgerd migrate: %w\n%s", err, out)
	}
	// Ports of our choosing rather than 0: ledgerd logs the bound addresses
	// at info, and the load test runs it at warn; the peers must also be
	// known before any instance starts. Not the operations listener's
	// default either, which another ledgerd on this machine may hold.
	addrs := make([]string, 2*o.Instances)
	for i := range addrs {
		port, err := dynamolocal.FreePort()
		if err != nil {
			return nil, err
		}
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	f := &fleet{Token: creds.ServiceToken, AdminToken: creds.AdminToken}
	for i := range o.Instances {
		f.Instances = append(f.Instances, &Instance{Name: fmt.Sprintf("ledgerd-%d", i+1),
			URL: "http://" + addrs[2*i], OpsURL: "http://" + addrs[2*i+1], exited: make(chan struct{})})
	}
	for i, in := range f.Instances {
		args := append([]string{"serve", "-listen", addrs[2*i], "-ops-listen", addrs[2*i+1]}, o.Args...)
		if o.Affinity {
			args = append(args, f.peerArgs(i)...)
			if o.Health > 0 {
				args = append(args, "-peer-health-interval", o.Health.String())
			}
		}
		in.cmd = exec.Command(o.Bin, args...)
		in.cmd.Env, in.cmd.Stderr = environ, prefixed(os.Stderr, in.Name+": ")
		if err := in.cmd.Start(); err != nil {
			f.Stop()
			return nil, fmt.Errorf("start %s: %w", in.Name, err)
		}
		go func() { _ = in.cmd.Wait(); close(in.exited) }()
	}
	for _, in := range f.Instances {
		if err := waitHealthy(ctx, in.URL, 30*time.Second); err != nil {
			f.Stop()
			return nil, err
		}
	}
	return f, nil
}

// peerArgs are the flags that tell instance i of its peers: every
// instance's API, itself among them.
func (f *fleet) peerArgs(i int) []string {
	urls := make([]string, len(f.Instances))
	for j, in := range f.Instances {
		urls[j] = in.URL
	}
	return []string{"-peers", strings.Join(urls, ","), "-self", f.Instances[i].URL}
}

// Stop ends every instance still running, gracefully (SIGTERM), and waits
// for them.
func (f *fleet) Stop() {
	for _, in := range f.Instances {
		if in.cmd != nil && in.cmd.Process != nil && in.alive() {
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, in := range f.Instances {
		if in.cmd != nil && in.cmd.Process != nil {
			<-in.exited
		}
	}
}

func (in *Instance) alive() bool {
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// kill ends the instance at once (SIGKILL), as a crash or an OOM kill
// would: no graceful shutdown, its calls in flight are cut off.
func (in *Instance) kill() error {
	if err := in.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", in.Name, err)
	}
	<-in.exited
	return nil
}

// waitHealthy waits for GET /healthz to answer 200.
func waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := healthy(ctx, http.DefaultClient, url)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ledgerd at %s did not become healthy: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthy asks url's GET /healthz once.
func healthy(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", res.Status)
	}
	return nil
}

// prefixed writes each line to w after prefix, so that the instances'
// logs, which share the load tool's stderr, say whose they are.
func prefixed(w io.Writer, prefix string) io.Writer {
	return &prefixWriter{w: w, prefix: prefix}
}

type prefixWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s", p.prefix, p.partial[:i+1]); err != nil {
			return len(b), err
		}
		p.partial = p.partial[i+1:]
	}
}
