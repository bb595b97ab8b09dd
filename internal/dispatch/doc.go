// Package dispatch delivers the ledger's events to webhook endpoints, in
// version order per user and endpoint, and keeps the endpoints themselves.
// It reads the ledger's entries from the ledger table's stream (through
// the stream-consumer package the projection uses) and from the ledger
// itself; it writes only its own table, "webhooks" (migrations/), never
// the ledger: the entries are the outbox.
//
// What it keeps sits behind Store: internal/dispatch/dynamo keeps it in
// the webhooks table (its doc.go has the items), internal/dispatch/memory
// in memory (for tests); both pass internal/dispatch/dispatchtest's
// Contract. What it decides is machine.go's pure functions, tested with
// no store. This package imports no SDK (depguard's dispatch-without-sdk).
//
// Two ways an event goes (direct.go): a user with no queue for the
// endpoint (nothing waiting: a release deletes the queue) is sent its
// events by Apply itself, in version order, before the stream's
// checkpoint moves, and what was sent is written together; a user with a
// queue (a failing event, a redelivery), or more than directMost events
// in the batch (a hot user), has the events marked on it and delivered by
// Run under the queue's claim. A direct attempt without a 2xx makes the
// queue behind its event.
//
// What is written of a delivery (pack.go): an event answered 2xx at the
// first attempt of its round (the happy path) has no item of its own: it
// goes in a pack, one item holding many such events of an endpoint
// (their ids less than PackSpan apart, at most PackMost), written with
// the batch's other direct sends or in the queue's group transaction.
// Only an event with a failed attempt in its round has a delivery row,
// updated at each attempt. ListDeliveries takes an event's row and its
// packed occurrences together (history.go), so that it lists what a row
// per event would show: one row per endpoint and event, its state,
// attempts and last status those of its latest attempt, its attempt log
// the union of all.
//
// What holds:
//
//   - Order: a user's events reach an endpoint in version order. Sent
//     directly, one after another by the stream's reader, which holds the
//     user's shard (a lease), the next batch only after this one; only to
//     a user without a queue, and a queue is deleted only when all it was
//     marked with is resolved, so the two ways never overlap. A user found
//     without a queue is remembered so (direct.go, noQueue) until this
//     process marks its queue, a redelivery counts itself on the endpoint
//     (every batch with an entry written after that reads its users
//     again), or the stream consumer takes a shard (which another process
//     may have held and made queues under). Only the
//     holder of a queue's claim (a conditional write with an expiry: the
//     mark of an idle queue, or a claim of a due one) sends its events,
//     one after another, each only after the previous one's 2xx or last
//     attempt; done moves only forward, by a write conditional on the
//     queue's record version as read (claims and redeliveries move it, a
//     mark of wanted does not: a release also requires wanted <= done).
//     A head that got no 2xx is put off, and nothing after it goes until
//     it does or is given up.
//   - Nothing lost: the stream consumer checkpoints a batch only after its
//     direct sends are answered and their packs and rows written, and the
//     queues of its other users record wanted; a queue's events are the entries
//     the stream handed over (as written: the same decoding) or else read
//     from the ledger (consistent reads), so a trimmed or lost stream
//     record delays nothing that a later record or a redelivery does not
//     recover.
//   - At least once, duplicates only as the same webhook-id: the 2xx of a
//     group (at most 90 items, at most 250 ms old) are put on the record
//     together, their pack (rows for those with a failed attempt) and done
//     in one transaction; a crash before it sends
//     them again, never another event under its id, nor another body: an
//     event's entry is as it was written (a purchase's refunded_amount
//     and a grant's reversed_amount, which later entries move, read as 0).
//     Every attempt that got no 2xx is written before the next attempt
//     (a given-up one ends its group). So after a dispatcher dies, the
//     one that takes its queue over sends again, in version order, the
//     events it had sent since done was last written (one group at
//     most), and the reader that takes a dead one's shard reads its last
//     batch again and sends what it sent directly again: a receiver that
//     dedupes by webhook-id, as Standard Webhooks asks, sees each user's
//     events once and in version order. Writing
//     done before each next event instead costs a write per event, one
//     after another: a hot user's events then lag without bound
//     (docs/performance.md, "Webhooks").
//   - An endpoint receives the entries written at or after its
//     create_time (to the microsecond, the ledger's precision); a deleted
//     or disabled endpoint gets no attempt that starts after its call
//     answered: an attempt starts only on an endpoint read at most
//     EndpointRefresh before, which the API waits. Apply marks no queue
//     for a disabled endpoint; its due queues wait (looked at again every
//     minute) and go on where they stopped if it is enabled again.
//   - A 410 disables the endpoint (disabled_reason says so); after the
//     schedule's last attempt the event is FAILED and done moves past it.
//   - RedeliverWebhookEvents moves done back (never wanted forward; a
//     user without a queue gets one, wanting the user's last entry) and
//     records redo, so that a holder whose group is not yet written sends
//     again what was asked too: the events are sent again, in order, read
//     from the ledger. A user's events being sent directly when the
//     redelivery makes the queue may arrive once more after it (the same
//     webhook-ids).
//
// Wiring: New(dynamo.New(db, webhooksTable, nil), ledgerStore,
// Options{Sender, EncodeEntry: api.EntryJSON, Observer}) and go Run(ctx); the stream consumer calls
// Apply with each batch and checkpoints after it returns nil (Apply's
// marks claim idle queues for Run only while Run delivers); the API
// calls ListDeliveries and Redeliver, and waits EndpointRefresh before it
// answers a disable or a delete; the notice finder calls Notify. Several
// dispatchers may run on one table: claims share the queues.
package dispatch
