package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/sweep"
	"github.com/pointledger/pointledger/migrations"
)

// Config is what ledgerd is told by flags and LEDGER_* environment variables
// (a flag wins over its variable).
type Config struct {
	ListenAddr      string
	Endpoint        string
	Region          string
	TablePrefix     string
	AmountScale     int
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
	Projector       bool
	LeaseTTL        time.Duration
	MaxBatch        int
	BatchLinger     time.Duration
	MaxBuckets      int           // distinct expiry times one account may hold
	MaxHolds        int           // open holds one account may have
	MaxPending      int           // pending grants one account may have
	BudgetGrowth    int           // throttles of a budget's shards within a window that double them; 0: never
	KindRefresh     time.Duration // how often the point kinds are read again
	MaxKinds        int           // point kinds the program may have
	LeanWrites      bool          // the store's TransactWriteItems and GetItem through ddbwire, not the SDK's stack; GetRecords' answers read by ddbwire
	LeanConns       bool          // ddbwire's requests over its own HTTP/1.1 connections, not net/http's Transport

	metrics *metrics.Metrics // nil: not measured
	// pageTokenKey is the page tokens' key when LEDGER_PAGE_TOKEN_KEY is
	// not set: serve's, derived from the credentials (pageTokens).
	pageTokenKey []byte
}

// flags registers the options shared by the commands that talk to DynamoDB.
func (c *Config) flags(fs *flag.FlagSet, getenv func(string) string) error {
	s := newSettings(fs, getenv)
	s.String(&c.Endpoint, "dynamodb-endpoint", "LEDGER_DYNAMODB_ENDPOINT", "",
		"DynamoDB endpoint URL, e.g. http://localhost:8000 for DynamoDB Local; empty: the AWS endpoint of the region")
	s.String(&c.Region, "region", "LEDGER_REGION", "", "AWS region; empty: from the AWS environment, else us-east-1")
	s.String(&c.TablePrefix, "table-prefix", "LEDGER_TABLE_PREFIX", "", "prefix of the table names, e.g. prod-")
	s.String(&c.LogLevel, "log-level", "LEDGER_LOG_LEVEL", "info", "debug, info, warn or error")
	s.String(&c.LogFormat, "log-format", "LEDGER_LOG_FORMAT", "json", "json or text")
	s.Int(&c.MaxBuckets, "max-buckets", "LEDGER_MAX_BUCKETS", ledger.DefaultMaxBuckets,
		"distinct expiry times one account may hold; a grant that would pass it is refused (TOO_MANY_BUCKETS)")
	s.Int(&c.MaxHolds, "max-holds", "LEDGER_MAX_HOLDS", ledger.DefaultMaxHolds,
		"open holds one account may have; an authorization that would pass it is refused (TOO_MANY_HOLDS)")
	s.Int(&c.MaxPending, "max-pending", "LEDGER_MAX_PENDING", ledger.DefaultMaxPending,
		"pending grants (with an effective time not yet reached) one account may have; a grant that would pass it is refused (TOO_MANY_PENDING)")
	s.Int(&c.BudgetGrowth, "budget-growth-throttles", "LEDGER_BUDGET_GROWTH_THROTTLES", dynamo.DefaultBudgetGrowth.Throttles,
		"throttles of one budget's shards within "+dynamo.DefaultBudgetGrowth.Window.String()+" after which this process doubles its shards, up to 64; 0: never")
	s.Duration(&c.KindRefresh, "kind-refresh", "LEDGER_KIND_REFRESH", dynamo.DefaultKindRefresh,
		"how often this process reads the point kinds again: a change of a kind applies here within twice it (at most "+dynamo.MaxKindRefresh.String()+")")
	s.Int(&c.MaxKinds, "max-kinds", "LEDGER_MAX_KINDS", ledger.DefaultMaxKinds,
		"point kinds the program may have besides standard; a creation past it is refused (TOO_MANY_KINDS)")
	s.Switch(&c.LeanWrites, "lean-writes", "LEDGER_LEAN_WRITES",
		"send the store's TransactWriteItems and GetItem without the AWS SDK's middleware stack (same endpoint, credentials, retries and errors), and read the stream's GetRecords answers without the SDK's deserializer (issue 37); false: through the SDK")
	s.Switch(&c.LeanConns, "lean-conns", "LEDGER_LEAN_CONNS",
		"with -lean-writes: send those requests over HTTP/1.1 keep-alive connections of ddbwire's own, written and read by the caller's goroutine (the HTTP client's dialer, TLS and timeouts; issue 37); false, or with a proxy for the endpoint: through the SDK's HTTP client")
	return s.err()
}

// budgetGrowth is when the store grows a throttled budget's shards:
// -budget-growth-throttles within dynamo.DefaultBudgetGrowth's window, 0
// never.
func (c *Config) budgetGrowth() (dynamo.BudgetGrowth, error) {
	if c.BudgetGrowth < 0 {
		return dynamo.BudgetGrowth{}, fmt.Errorf("-budget-growth-throttles (LEDGER_BUDGET_GROWTH_THROTTLES) must be 0 (never) or more, not %d", c.BudgetGrowth)
	}
	return dynamo.BudgetGrowth{Throttles: cmp.Or(c.BudgetGrowth, -1), Window: dynamo.DefaultBudgetGrowth.Window}, nil
}

func (c *Config) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.LogFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", c.LogFormat)
}

// clients builds the DynamoDB and DynamoDB Streams clients from the AWS
// environment (region, credentials), pointed at Endpoint when one is set. An
// emulator needs no real credentials, so with an endpoint and none in the
// environment they get fixed local ones.
func (c *Config) clients(ctx context.Context, getenv func(string) string) (*dynamodb.Client, *dynamodbstreams.Client, error) {
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(ddbhttp.Client())}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.Endpoint != "" && getenv("AWS_ACCESS_KEY_ID") == "" && getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if c.metrics != nil {
		cfg.APIOptions = append(cfg.APIOptions, c.metrics.DynamoDBMiddleware)
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.HTTPClient = ddbhttp.OneWrite(o.HTTPClient)
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			// DynamoDB Local's CRC32 header does not match its error bodies;
			// TLS guards the real service's responses anyway.
			o.DisableValidateResponseChecksum = true
		}
	})
	streams := dynamodbstreams.NewFromConfig(cfg, func(o *dynamodbstreams.Options) {
		o.HTTPClient = ddbhttp.OneWrite(o.HTTPClient)
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		if c.LeanWrites {
			// The stream's pages read by ddbwire's decoder; the rest of
			// the call, and any answer it does not read, the SDK's.
			ddbwire.LeanGetRecords(o)
		}
	})
	return db, streams, nil
}

// storeAPI is what the store calls DynamoDB through: db, with its
// TransactWriteItems and GetItem sent by ddbwire unless -lean-writes=false,
// over its own connections unless -lean-conns=false.
func (c *Config) storeAPI(ctx context.Context, db *dynamodb.Client) (dynamo.API, error) {
	if !c.LeanWrites {
		return db, nil
	}
	return ddbwire.New(ctx, db, ddbwire.Options{HTTPClient: ddbhttp.Unwrap(db.Options().HTTPClient), Observe: c.observeDynamoDB(), OwnConns: c.LeanConns})
}

// observeDynamoDB is what counts ddbwire's calls where the SDK's metrics
// middleware counts the SDK's: nil without metrics.
func (c *Config) observeDynamoDB() func(string, time.Duration, error) {
	if c.metrics == nil {
		return nil
	}
	return c.metrics.DynamoDBCall
}

// projectorFlags registers the options of the stream projector.
func (c *Config) projectorFlags(fs *flag.FlagSet, getenv func(string) string) error {
	s := newSettings(fs, getenv)
	s.Duration(&c.LeaseTTL, "lease-ttl", "LEDGER_LEASE_TTL", 10*time.Second, "a shard lease (projector, dispatcher, sweeper) not renewed for this long is taken over by another")
	return s.err()
}

// ledgerParts are the pieces every command builds the same way.
type ledgerParts struct {
	store   *dynamo.Ledger
	history *projection.History
	db      *dynamodb.Client
	streams *dynamodbstreams.Client
	tokens  *pagetoken.Codec // the page tokens of every list
}

func (c *Config) parts(ctx context.Context, getenv func(string) string, log *slog.Logger) (*ledgerParts, error) {
	db, streams, err := c.clients(ctx, getenv)
	if err != nil {
		return nil, err
	}
	tokens, err := c.pageTokens(getenv)
	if err != nil {
		return nil, err
	}
	if c.MaxBuckets < 1 || c.MaxBuckets > 1000 {
		return nil, fmt.Errorf("-max-buckets (LEDGER_MAX_BUCKETS) must be 1 to 1000, not %d", c.MaxBuckets)
	}
	if c.MaxHolds < 1 || c.MaxHolds > 1000 {
		return nil, fmt.Errorf("-max-holds (LEDGER_MAX_HOLDS) must be 1 to 1000, not %d", c.MaxHolds)
	}
	if c.MaxPending < 1 || c.MaxPending > 1000 {
		return nil, fmt.Errorf("-max-pending (LEDGER_MAX_PENDING) must be 1 to 1000, not %d", c.MaxPending)
	}
	growth, err := c.budgetGrowth()
	if err != nil {
		return nil, err
	}
	if c.KindRefresh <= 0 || c.KindRefresh > dynamo.MaxKindRefresh {
		return nil, fmt.Errorf("-kind-refresh (LEDGER_KIND_REFRESH) must be more than 0 and at most %s, not %s", dynamo.MaxKindRefresh, c.KindRefresh)
	}
	if c.MaxKinds < 1 || c.MaxKinds > 1000 {
		return nil, fmt.Errorf("-max-kinds (LEDGER_MAX_KINDS) must be 1 to 1000, not %d", c.MaxKinds)
	}
	o := dynamo.Options{Table: c.TablePrefix + migrations.LedgerTable, Logger: log, MaxBatch: c.MaxBatch, Linger: c.BatchLinger, PageTokens: tokens,
		MaxBuckets: c.MaxBuckets, MaxHolds: c.MaxHolds, MaxPending: c.MaxPending, BudgetGrowth: growth,
		KindRefresh: c.KindRefresh, MaxKinds: c.MaxKinds}
	if c.metrics != nil {
		o.Observer = c.metrics
	}
	api, err := c.storeAPI(ctx, db)
	if err != nil {
		return nil, err
	}
	store := dynamo.New(api, o)
	return &ledgerParts{
		store:   store,
		history: projection.NewHistory(db, c.TablePrefix+migrations.HistoryTable, store, tokens),
		db:      db,
		streams: streams,
		tokens:  tokens,
	}, nil
}

// pageTokenKeyPurpose names, in the derivation, what the key derived from
// the credentials is for; a new purpose gets a name of its own.
const pageTokenKeyPurpose = "pointledger page token key v1"

// pageTokens is the codec of page tokens. Its key is, in order:
//
//   - LEDGER_PAGE_TOKEN_KEY (hex, at least 32 bytes): a secret comes from
//     the environment only, never a flag, which would show in the process
//     list;
//   - else pageTokenKey, which serve derives from the credentials' signing
//     key (auth.Authenticator.DeriveKey): a secret every instance already
//     shares, so tokens survive restarts and work on every instance, and no
//     one without the credentials can make one;
//   - else a key derived from the ledger table's name, which is no secret:
//     for serve -insecure-dev, where every caller is admin anyway, and for
//     the commands that give out no page token (project, reconcile, expire).
func (c *Config) pageTokens(getenv func(string) string) (*pagetoken.Codec, error) {
	v := getenv("LEDGER_PAGE_TOKEN_KEY")
	if v == "" {
		if c.pageTokenKey != nil {
			return pagetoken.New(c.pageTokenKey)
		}
		return pagetoken.Derived(c.TablePrefix + migrations.LedgerTable), nil
	}
	key, err := hex.DecodeString(v)
	if err != nil {
		// Not err itself: it would quote a character of the secret.
		return nil, errors.New("LEDGER_PAGE_TOKEN_KEY: want hex digits")
	}
	tokens, err := pagetoken.New(key)
	if err != nil {
		return nil, fmt.Errorf("LEDGER_PAGE_TOKEN_KEY: %w", err)
	}
	return tokens, nil
}

func (c *Config) leaseTable(p *ledgerParts) *projection.LeaseTable {
	return projection.NewLeaseTable(p.db, c.TablePrefix+migrations.LeaseTable, nil)
}

// newSweeper is the expiry sweeper of the ledger, sharing its shards with
// other sweepers through the lease table.
func (c *Config) newSweeper(p *ledgerParts, interval time.Duration, log *slog.Logger) *sweep.Sweeper {
	return sweep.New(p.store, c.leaseTable(p), sweep.Options{Shards: dynamo.ExpiryShards, Interval: interval, LeaseTTL: c.LeaseTTL, Log: log})
}

func (c *Config) projector(p *ledgerParts, log *slog.Logger) *projection.Projector {
	return projection.NewProjector(c.TablePrefix+migrations.LedgerTable, p.db, p.streams, c.leaseTable(p), p.history,
		projection.Options{LeaseTTL: c.LeaseTTL, Logger: log})
}

// runProjector runs pr until ctx ends, logging its status every interval
// (statusLine), then hands its leases over.
func runProjector(ctx context.Context, pr *projection.Projector, log *slog.Logger, interval time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	status := statusLine{log: log}
	for {
		select {
		case err := <-done:
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			pr.Release(rctx)
			cancel()
			return err
		case <-tick.C:
			status.write(ctx, pr.Status())
		}
	}
}

// statusLine logs the projector's status: at info when it changed since the
// last line (the shards held, caught up or not, the entries applied), else
// at debug, so that an idle projector does not repeat the same line every
// 30 s (issue 22, item 7). The first line is always at info.
type statusLine struct {
	log  *slog.Logger
	last *history.ProjectorStatus
}

func (s *statusLine) write(ctx context.Context, st history.ProjectorStatus) {
	level := slog.LevelInfo
	if s.last != nil && !statusChanged(*s.last, st) {
		level = slog.LevelDebug
	}
	s.last = &st
	s.log.Log(ctx, level, "projection status", "shards", st.Shards, "caught_up", st.CaughtUp,
		"entries_applied", st.Applied, "lag", st.LagText, "newest_applied_entry_time", st.NewestApplied)
}

// statusChanged says whether an operator would read something new in now:
// the lag and the newest entry move only with the entries applied, and the
// time of the last pass moves on every pass, busy or idle.
func statusChanged(before, now history.ProjectorStatus) bool {
	return before.CaughtUp != now.CaughtUp || before.Applied != now.Applied || !slices.Equal(before.Shards, now.Shards)
}

func validScale(n int) error {
	if n < 0 || n > 8 {
		return fmt.Errorf("amount scale %d: want 0 to 8", n)
	}
	return nil
}
