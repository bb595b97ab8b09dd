package projection

import (
	"context"
	"time"

	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/stream"
)

// Options configure a Projector: those of its stream consumer, whose Name
// is the projection's (stream.ProjectionName) unless set.
type Options = stream.Options

// Projector consumes the ledger table's stream into History: a
// stream.Consumer whose handler is the History (so also its catch-up from
// the ledger). Several projectors (processes) may run against one stream
// and share its shards by lease; applying is idempotent, so records
// applied again after a crash or a takeover change nothing.
type Projector struct {
	consumer *stream.Consumer
}

// History is the projector's handler, catch-up included.
var _ stream.CatchUpper = (*History)(nil)

// NewProjector returns a projector of the stream of table into h.
func NewProjector(table string, tables stream.TableAPI, streams stream.StreamsAPI, leases *LeaseTable, h *History, o Options) *Projector {
	if o.Name == "" {
		o.Name = stream.ProjectionName
	}
	return &Projector{consumer: stream.NewConsumer(table, tables, streams, leases, h, o)}
}

// NewSharedProjector is a projector whose reading of the stream feeds also
// others (the webhook dispatcher), after h: one reader instead of one per
// consumer. A failure of any handler reads the batch again for all of
// them, so each must be idempotent (stream.FanOut).
func NewSharedProjector(table string, tables stream.TableAPI, streams stream.StreamsAPI, leases *LeaseTable, h *History, others []stream.Handler, o Options) *Projector {
	if o.Name == "" {
		o.Name = stream.ProjectionName
	}
	handlers := append([]stream.Handler{h}, others...)
	return &Projector{consumer: stream.NewConsumer(table, tables, streams, leases, stream.FanOut(handlers...), o)}
}

// Owner is the name this projector holds leases under.
func (p *Projector) Owner() string { return p.consumer.Owner() }

// Run projects until ctx ends (returning nil) or an AfterApply hook fails.
// Leases it holds are not released: call Release for a clean handover.
func (p *Projector) Run(ctx context.Context) error { return p.consumer.Run(ctx) }

// Release gives up the leases this projector holds, so that others take
// the shards over at once. Call it after Run returns.
func (p *Projector) Release(ctx context.Context) { p.consumer.Release(ctx) }

// Status reports the projector's shards, progress and lag.
func (p *Projector) Status() history.ProjectorStatus {
	return p.consumer.Status()
}

// The lease table is the stream package's; these names keep serving the
// projection's callers (ledgerd, the sweeper, reconciliation's lock),
// which reach it through the projection.

// LeaseTable is stream.LeaseTable.
type LeaseTable = stream.LeaseTable

// ErrLeaseHeld is stream.ErrLeaseHeld.
var ErrLeaseHeld = stream.ErrLeaseHeld

// NewLeaseTable returns the lease table named table (stream.NewLeaseTable).
func NewLeaseTable(db stream.LeaseAPI, table string, now func() time.Time) *LeaseTable {
	return stream.NewLeaseTable(db, table, now)
}

// DefaultOwner names this process as a lease owner (stream.DefaultOwner).
func DefaultOwner() string { return stream.DefaultOwner() }
