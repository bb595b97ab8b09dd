package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/auth"
)

// affinityConfig is who this instance's peers are, so that each user's
// mutations go to one instance (package affinity); off without -peers.
type affinityConfig struct {
	peers     string
	self      string
	interval  time.Duration
	timeout   time.Duration
	tokenFile string
}

func (a *affinityConfig) flags(fs *flag.FlagSet, getenv func(string) string) error {
	s := newSettings(fs, getenv)
	s.String(&a.peers, "peers", "LEDGER_PEERS", "",
		"the instances of this deployment, this one included, to keep each user's mutations on one of them: base URLs "+
			"(http://host:port) or dns:<name>:<port> (a name resolving to every instance: a headless Service), comma-separated; "+
			"empty: off")
	s.String(&a.self, "self", "LEDGER_SELF", "",
		"this instance's base URL as its peers know it; empty: the peer whose health check answers this instance's id")
	s.Duration(&a.interval, "peer-health-interval", "LEDGER_PEER_HEALTH_INTERVAL", time.Second,
		"time between health checks of the peers (and lookups of a dns: name); a peer that fails one owns no user until one passes")
	s.Duration(&a.timeout, "forward-timeout", "LEDGER_FORWARD_TIMEOUT", 2*time.Second,
		"how long a mutation forwarded to its user's owner, or a health check, may take; then it is committed here and the owner is down")
	s.String(&a.tokenFile, "peer-token-file", "LEDGER_PEER_TOKEN_FILE", "",
		"file holding the peer token this instance sends its peers; or the token itself in LEDGER_PEER_TOKEN")
	return s.err()
}

// newPeers is this instance's view of its peers, or nil when -peers is
// not set. Every instance must have the same credentials, so that the peer
// token this one sends is one they accept: it must be a peer's in authn.
func (a *affinityConfig) newPeers(ctx context.Context, authn *auth.Authenticator, getenv func(string) string, o affinity.Observer, log *slog.Logger) (*affinity.Peers, error) {
	if a.peers == "" {
		if a.self != "" {
			return nil, errors.New("-self (LEDGER_SELF) goes with -peers (LEDGER_PEERS)")
		}
		return nil, nil // off
	}
	if a.interval <= 0 || a.timeout <= 0 {
		return nil, errors.New("-peer-health-interval and -forward-timeout must be more than 0")
	}
	members, err := affinity.ParseMembers(a.peers, nil)
	if err != nil {
		return nil, fmt.Errorf("-peers (LEDGER_PEERS): %w", err)
	}
	var self string
	if a.self != "" {
		if self, err = affinity.NormalizeURL(a.self); err != nil {
			return nil, fmt.Errorf("-self (LEDGER_SELF): %w", err)
		}
		if !strings.Contains(a.peers, "dns:") {
			list, _ := members(ctx) // a list of URLs only: no lookup, no error
			if !slices.Contains(list, self) {
				return nil, fmt.Errorf("-self %s is not among -peers %s", self, a.peers)
			}
		}
	}
	token, err := a.token(getenv)
	if err != nil {
		return nil, err
	}
	if !authn.Insecure() {
		if token == "" {
			return nil, errors.New("-peers needs the peer token the instances send each other: LEDGER_PEER_TOKEN or -peer-token-file " +
				"(LEDGER_PEER_TOKEN_FILE); `ledgerd token -new peer` makes one (see docs/operations.md, User affinity)")
		}
		if id, err := authn.Authenticate("Bearer " + token); err != nil || id.Role != auth.RolePeer {
			return nil, errors.New("the peer token is not a peer's in the credentials: every instance needs the same credentials, with the token's hash under role peer")
		}
	}
	return affinity.New(affinity.Options{Members: members, Self: self, Interval: a.interval, Timeout: a.timeout, Token: token, Observer: o, Log: log}), nil
}

// token is the peer token, from LEDGER_PEER_TOKEN or -peer-token-file: a
// secret comes from the environment or a file, never a flag, which would
// show in the process list.
func (a *affinityConfig) token(getenv func(string) string) (string, error) {
	inline := getenv("LEDGER_PEER_TOKEN")
	if a.tokenFile == "" {
		return inline, nil
	}
	if inline != "" {
		return "", errors.New("the peer token comes from LEDGER_PEER_TOKEN or -peer-token-file (LEDGER_PEER_TOKEN_FILE), not both")
	}
	b, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return "", fmt.Errorf("-peer-token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
