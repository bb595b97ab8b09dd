package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchdynamo "github.com/pointledger/pointledger/internal/dispatch/dynamo"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/notice"
	noticedynamo "github.com/pointledger/pointledger/internal/notice/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/stream"
	"github.com/pointledger/pointledger/internal/webhook"
	"github.com/pointledger/pointledger/migrations"
)

// dispatchName names the dispatcher's own reading of the stream in the
// lease table: its shards and checkpoints, apart from the projection's.
const dispatchName = "dispatch"

// dispatchReadInterval is the least time between two reads of a shard by
// the dispatcher's own reading of the stream (stream.Options.ReadInterval):
// at most 5 reads a second a shard, the rate DynamoDB Streams allows a
// shard's readers all together, where reading on at once made it a second
// reader as eager as the projector's. On DynamoDB Local, whose answers to
// GetRecords slow down as the stream grows, every read costs the write
// path; a batch's endpoints read, queue reads and pack writes are paid
// once a batch. It adds at most 200 ms to a delivery's lag.
const dispatchReadInterval = 200 * time.Millisecond

// deliveryConfig is how events are delivered, the same for serve and
// dispatch: which URLs an endpoint may have (the API checks them at
// creation, the dispatcher at every attempt), an attempt's timeout, the
// retry schedule, the users delivered at once per endpoint, and the
// notices' leads.
type deliveryConfig struct {
	policy         webhook.URLPolicy
	attemptTimeout time.Duration
	retryDelays    string           // -webhook-retry-delays as given
	schedule       webhook.Schedule // what check read in retryDelays
	perEndpoint    int
	leads          string          // -notice-leads as given
	noticeLeads    []time.Duration // what check read in leads; none: no notices
	noticeInterval time.Duration   // between the notice finder's passes
}

// defaultRetryDelays is dispatch.DefaultSchedule's delays as an operator
// writes them ("5s,5m,30m,2h,..."): the flag's default, written from the one
// default schedule rather than kept beside it.
var defaultRetryDelays = formatRetryDelays(dispatch.DefaultSchedule.Delays)

// formatRetryDelays writes delays as parseRetryDelays reads them, each as
// short as Go's duration syntax allows (5m, not 5m0s).
func formatRetryDelays(delays []time.Duration) string {
	parts := make([]string, len(delays))
	for i, d := range delays {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// claimMargin is how much longer than an attempt a dispatcher's claim on a
// queue holds without renewal: the claim must outlast the attempt
// (dispatch.Options.ClaimTTL), or another dispatcher sends the head again
// while it is under way. It is also how long a killed dispatcher's queues
// wait, beyond the attempt timeout, before another goes on with them.
const claimMargin = 30 * time.Second

func (d *deliveryConfig) flags(s *settings) {
	s.Bool(&d.policy.AllowHTTP, "webhook-allow-http", "LEDGER_WEBHOOK_ALLOW_HTTP",
		"accept webhook endpoints with plain http URLs (make run does); off: https only")
	s.Bool(&d.policy.AllowLoopback, "webhook-allow-loopback", "LEDGER_WEBHOOK_ALLOW_LOOPBACK",
		"accept webhook endpoints on loopback addresses, 127.0.0.0/8 and ::1 (make run does); off: refused")
	s.Bool(&d.policy.AllowPrivate, "webhook-allow-private", "LEDGER_WEBHOOK_ALLOW_PRIVATE",
		"accept webhook endpoints on private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10), receivers inside your network; off: refused")
	s.Duration(&d.attemptTimeout, "webhook-attempt-timeout", "LEDGER_WEBHOOK_ATTEMPT_TIMEOUT", webhook.DefaultAttemptTimeout,
		"how long one delivery attempt may take before it counts as failed")
	s.String(&d.retryDelays, "webhook-retry-delays", "LEDGER_WEBHOOK_RETRY_DELAYS", defaultRetryDelays,
		fmt.Sprintf("the waits after a failed delivery attempt before the next, comma-separated durations, each moved by up to ±%.0f%% at random; after the last attempt the event is FAILED",
			dispatch.DefaultSchedule.Jitter*100))
	s.Int(&d.perEndpoint, "webhook-per-endpoint", "LEDGER_WEBHOOK_PER_ENDPOINT", dispatch.DefaultPerEndpoint,
		"users whose events are delivered at once to one endpoint (each user's in order); as many idle connections to a receiver are kept")
	s.String(&d.leads, "notice-leads", "LEDGER_NOTICE_LEADS", "7d",
		"how long before points expire the points.expiring notice goes, comma-separated (7d,1d); off: no notices")
	s.Duration(&d.noticeInterval, "notice-interval", "LEDGER_NOTICE_INTERVAL", notice.DefaultInterval,
		"between two passes of the points.expiring finder, each reading the account of every user with points expiring within the longest lead; points granted to expire sooner than two intervals are noticed at their grant")
}

// check reads what the flags say, once they are parsed.
func (d *deliveryConfig) check() error {
	if d.perEndpoint < 1 {
		return fmt.Errorf("-webhook-per-endpoint (LEDGER_WEBHOOK_PER_ENDPOINT) must be at least 1, not %d", d.perEndpoint)
	}
	var err error
	if d.schedule, err = parseRetryDelays(d.retryDelays); err != nil {
		return fmt.Errorf("-webhook-retry-delays (LEDGER_WEBHOOK_RETRY_DELAYS): %w", err)
	}
	if strings.TrimSpace(d.leads) == "off" {
		d.noticeLeads = nil
		return nil
	}
	if d.noticeLeads, err = notice.ParseLeads(d.leads); err != nil {
		return fmt.Errorf("-notice-leads (LEDGER_NOTICE_LEADS): %w", err)
	}
	if d.noticeInterval <= 0 {
		return fmt.Errorf("-notice-interval (LEDGER_NOTICE_INTERVAL) must be more than 0, not %s", d.noticeInterval)
	}
	// A bucket enters a lead's window at most an interval before the pass
	// that sees it: a lead shorter than that could pass unnoticed.
	if len(d.noticeLeads) == 0 { // off: no notices, no finder
		return nil
	}
	if shortest := slices.Min(d.noticeLeads); shortest < d.noticeInterval {
		return fmt.Errorf("-notice-leads (LEDGER_NOTICE_LEADS): %s is shorter than -notice-interval (LEDGER_NOTICE_INTERVAL) %s: a bucket could expire between two passes unnoticed", shortest, d.noticeInterval)
	}
	return nil
}

// parseRetryDelays reads a retry schedule, "5s,5m,30m": Go durations,
// each more than 0, jittered as dispatch.DefaultSchedule is.
func parseRetryDelays(text string) (webhook.Schedule, error) {
	s := webhook.Schedule{Jitter: dispatch.DefaultSchedule.Jitter}
	for part := range strings.SplitSeq(text, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return webhook.Schedule{}, fmt.Errorf("%q is not a duration (30s, 5m, 2h)", strings.TrimSpace(part))
		}
		s.Delays = append(s.Delays, d)
	}
	if err := s.Check(); err != nil {
		return webhook.Schedule{}, err
	}
	return s, nil
}

// claimTTL is how long a dispatcher's claim on a queue holds unrenewed:
// an attempt and claimMargin.
func (d *deliveryConfig) claimTTL() time.Duration {
	attempt := d.attemptTimeout
	if attempt <= 0 {
		attempt = webhook.DefaultAttemptTimeout // the Sender's, for 0
	}
	return attempt + claimMargin
}

// delivery is the dispatcher of one process: its stream reader (nil when
// the projector's reader feeds it), the dispatcher and the notice finder.
type delivery struct {
	dispatcher *dispatch.Dispatcher
	consumer   *stream.Consumer
	notices    *notice.Finder
	log        *slog.Logger
}

// newDelivery builds the dispatcher; ownReader gives it its own reading of
// the stream (else the projector's reader feeds it: see sharedProjector).
func (c *Config) newDelivery(p *ledgerParts, d deliveryConfig, ownReader bool, log *slog.Logger) (*delivery, error) {
	var o dispatch.Options
	o.Sender = webhook.NewSender(webhook.Options{Policy: d.policy, Timeout: d.attemptTimeout, IdleConnsPerHost: d.perEndpoint})
	o.EncodeEntry = api.EntryJSON
	o.Schedule = d.schedule
	o.ClaimTTL = d.claimTTL()
	o.PerEndpoint = d.perEndpoint
	// The API waits this long before it answers a disable or a delete.
	o.EndpointRefresh = api.DefaultEndpointRefresh
	o.Codec = p.tokens
	o.Log = log
	var dl delivery
	if c.metrics != nil {
		o.Observer = c.metrics.WatchDispatcher(func() dispatch.Status { return dl.dispatcher.Status() })
	}
	table := c.TablePrefix + migrations.WebhookTable
	var err error
	if dl.dispatcher, err = dispatch.New(dispatchdynamo.New(p.db, table, nil), p.store, o); err != nil {
		return nil, err
	}
	if len(d.noticeLeads) > 0 {
		no := notice.Options{Leads: d.noticeLeads, Interval: d.noticeInterval, Shards: dynamo.ExpiryShards, Log: log}
		if c.metrics != nil {
			no.Observer = c.metrics.WatchNotices()
		}
		dl.notices, err = notice.New(p.store, noticedynamo.NewTable(p.db, table), c.leaseTable(p), no)
		if err != nil {
			return nil, err
		}
	}
	if ownReader {
		dl.consumer = stream.NewConsumer(c.TablePrefix+migrations.LedgerTable, p.db, p.streams, c.leaseTable(p), dl.handler(),
			stream.Options{Name: dispatchName, LeaseTTL: c.LeaseTTL, ReadInterval: dispatchReadInterval, Logger: log})
	}
	dl.log = log
	return &dl, nil
}

// handler is what the stream feeds: the dispatcher, then the notices of
// points granted to expire before the finder's next pass.
func (d *delivery) handler() stream.Handler {
	if d.notices == nil {
		return d.dispatcher
	}
	return inTurn{d.dispatcher, d.notices.Follow(d.dispatcher.Notify)}
}

// inTurn hands a batch to each handler in turn; a failure stops it, and
// the batch is read again for all (both are idempotent). Unlike
// stream.FanOut it is no stream.CatchUpper: neither of these catches up, so
// the consumer logs records the stream lost, as for the dispatcher alone.
type inTurn []stream.Handler

func (hs inTurn) Apply(ctx context.Context, entries []ledger.Entry) error {
	for _, h := range hs {
		if err := h.Apply(ctx, entries); err != nil {
			return err
		}
	}
	return nil
}

// sharedProjector is the projector whose one reading of the stream feeds
// history and the dispatcher both.
func (c *Config) sharedProjector(p *ledgerParts, d *delivery, log *slog.Logger) *projection.Projector {
	return projection.NewSharedProjector(c.TablePrefix+migrations.LedgerTable, p.db, p.streams, c.leaseTable(p), p.history,
		[]stream.Handler{d.handler()}, projection.Options{LeaseTTL: c.LeaseTTL, Logger: log})
}

// run delivers until ctx ends, then lets attempts under way finish and
// hands the stream's leases over. An error of one part stops them all.
func (d *delivery) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	part := func(name string, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	part("dispatcher", d.dispatcher.Run)
	if d.consumer != nil {
		part("dispatcher's stream reader", d.consumer.Run)
	}
	if d.notices != nil {
		part("notices", func(ctx context.Context) error { return d.notices.Run(ctx, d.dispatcher.Notify) })
	}
	wg.Wait()
	if d.consumer != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		d.consumer.Release(rctx)
		rcancel()
	}
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// dispatchCmd runs the webhook dispatcher alone (serve runs one too unless
// -dispatcher=false); several share the stream's shards and the queues.
func dispatchCmd(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c Config
	var d deliveryConfig
	fs := flag.NewFlagSet("dispatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := newSettings(fs, getenv)
	d.flags(s)
	var opsAddr string
	opsFlag(s, &opsAddr, "127.0.0.1:9092")
	if err := errors.Join(s.err(), c.flags(fs, getenv), c.projectorFlags(fs, getenv)); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	c.metrics = metrics.New()
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return err
	}
	dl, err := c.newDelivery(parts, d, true, log)
	if err != nil {
		return err
	}
	opsLn, err := listenOps(opsAddr)
	if err != nil {
		return err
	}
	stopOps := serveOps(opsLn, opsMux(c.metrics, nil, nil, dl.dispatcher, log), log)
	defer stopOps()
	log.Info("dispatching webhook events", "version", version, "owner", dl.consumer.Owner(), "table_prefix", c.TablePrefix,
		"notice_leads", d.noticeLeads, "webhook_allow_http", d.policy.AllowHTTP, "webhook_allow_loopback", d.policy.AllowLoopback,
		"webhook_allow_private", d.policy.AllowPrivate)
	return dl.run(ctx)
}
