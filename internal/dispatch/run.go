package dispatch

import (
	"context"
	"sync"
	"time"
)

// Run delivers until ctx ends: the queues this process just marked (Apply,
// Notify and Redeliver hand them over in-process, for latency; Apply's
// already claimed), and every PollInterval the queues the "due" index
// shows due now, in every shard. The index is eventually consistent and
// read only to find candidates: a queue is delivered only under its
// claim, decided on the queue itself. Users go in parallel, at most
// PerEndpoint attempts at once per endpoint (a queue waits for a slot to
// send, not to write). Run returns nil when ctx ends, after
// the attempts under way finish (each bounded by the Sender's timeout)
// and their queues, and those claimed but not yet started, are put off
// until now, so that another dispatcher goes on at once rather than
// after ClaimTTL.
func (d *Dispatcher) Run(ctx context.Context) error {
	// An attempt under way is not cut by the end of ctx: its outcome is
	// recorded and its queue released with work; ctx stops what follows.
	work := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	deliver := func(h handoff) {
		var err error
		if h.ref.Notice != "" {
			err = d.deliverNotice(work, ctx.Done(), h.ref)
		} else {
			err = d.deliverQueue(work, ctx.Done(), h)
		}
		if err != nil && ctx.Err() == nil {
			d.o.Log.Warn("deliver", "endpoint_id", h.ref.EndpointID, "user_id", h.ref.UserID, "error", err)
		}
	}
	start := func(h handoff) {
		d.mu.Lock()
		if d.inFlight[h.ref] {
			// A claimed queue whose last run is ending: deliver it after.
			if h.q != nil {
				d.pending[h.ref] = h
			}
			d.mu.Unlock()
			return
		}
		d.inFlight[h.ref] = true
		d.mu.Unlock()
		wg.Go(func() {
			for {
				if h.q != nil || ctx.Err() == nil {
					deliver(h) // once stopped, a claimed queue is put off at once
				}
				d.mu.Lock()
				next, again := d.pending[h.ref]
				delete(d.pending, h.ref)
				if !again {
					delete(d.inFlight, h.ref)
					delete(d.inbox, h.ref)
				}
				d.mu.Unlock()
				if !again {
					return
				}
				h = next
			}
		})
	}
	startAll := func() {
		d.mu.Lock()
		hs := d.handoffs
		d.handoffs = nil
		d.mu.Unlock()
		for _, h := range hs {
			if h.q != nil || ctx.Err() == nil {
				start(h)
			}
		}
	}
	d.mu.Lock()
	d.running = true
	d.mu.Unlock()
	found := make(chan []QueueRef, 1)
	go d.poll(ctx, found)
	for {
		select {
		case <-ctx.Done():
			// From here Apply claims nothing; what it claimed is put off
			// (the rest the "due" index finds).
			d.mu.Lock()
			d.running = false
			d.mu.Unlock()
			startAll()
			return nil
		case <-d.wake:
			startAll()
		case refs := <-found:
			for _, ref := range refs {
				start(handoff{ref: ref})
			}
		}
	}
}

// poll reads the "due" index every PollInterval and sends what it finds.
func (d *Dispatcher) poll(ctx context.Context, found chan<- []QueueRef) {
	t := time.NewTicker(d.o.PollInterval)
	defer t.Stop()
	for {
		refs, err := d.due(ctx)
		if err != nil && ctx.Err() == nil {
			d.o.Log.Warn("read due queues", "error", err)
		}
		if len(refs) > 0 {
			select {
			case found <- refs:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// due reads the store's "due" index for queues due now.
func (d *Dispatcher) due(ctx context.Context) ([]QueueRef, error) {
	refs, err := d.store.Due(ctx, d.o.Now())
	if err != nil {
		return refs, err
	}
	d.mu.Lock()
	d.st.LastPass = d.o.Now()
	d.mu.Unlock()
	return refs, nil
}
