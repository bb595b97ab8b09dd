// Package dispatch delivers the ledger's events to webhook endpoints, in
// version order per user and endpoint, and keeps the endpoints themselves.
// It reads the ledger's entries from the ledger table's stream (through
// the stream-consumer package the projection uses) and from the ledger
// itself; it writes only its own table, "webhooks" (migrations/), never
// the ledger: the entries are the outbox.
//
// The webhooks table (PK, SK strings) holds:
//
//   - Endpoints: PK "ENDPOINTS", SK "EP#<endpoint_id>": url, event_types,
//     description, disabled, disabled_reason, create_time and the signing
//     secrets (the current one, and the old one with its retire_time
//     during a rotation). Few and small, read with one consistent Query.
//   - A queue per endpoint and user: PK "Q#<endpoint_id>#<user_id>", SK
//     "Q": wanted (the highest version the stream has shown for the user),
//     done (the last version resolved: answered 2xx, given up, or skipped
//     because the endpoint does not subscribe to its type or the entry is
//     older than the endpoint), admit_from (the oldest entry time it
//     admits: the endpoint's create_time, earlier after a redelivery
//     asked by version or time), the head event's attempts, last status
//     and error and next_attempt_time, a claim (claim_owner, claim_until)
//     and a record version number (rvn). queue_endpoint + user_id index
//     it by endpoint (index queues_by_endpoint, written when the queue is
//     made). While done < wanted the queue is due: due_shard (one of
//     DueShards, by a hash of the key) and due_time (when its head may be
//     attempted, sortable text; while claimed, the claim's end) put it in
//     the sparse index "due", read only to find candidates, never to
//     decide. Every dispatcher reads every shard (no lease): the claim
//     decides who delivers. A queue put off (its head's next attempt, a
//     disabled endpoint, a stopped dispatcher) has claim_owner "(waiting)"
//     and claim_until its due time: no one holds it, and any dispatcher
//     may claim it then. redo is where a redelivery asked the queue to
//     start again, until its holder takes it into account.
//   - A delivery row per endpoint and event: PK "D#<endpoint_id>#<user_id>",
//     SK "V#<version, zero-padded>" (a notice: "N#<event id>": Notify is
//     handed the event, whose id the notice finder makes once per user,
//     bucket and lead, so it names the notice as well), with the event id,
//     type, state (PENDING, SUCCEEDED, FAILED), attempts, last status
//     code, last error and next attempt time; delivery_endpoint + event_id
//     index it by endpoint for ListWebhookDeliveries. An entry's row is
//     written whole, from the queue's count, in the same transaction as
//     the queue's done (the 2xx of a group) or its failed head, so a
//     redelivered event's row starts again at its next attempt.
//     A notice's delivery row is its own queue of one event: while PENDING
//     it carries due_shard and due_time, its data and time, and a claim,
//     and it is attempted outside the user's version order.
//   - Notices: PK "N#<user_id>", SK "<expire_time>#<lead>", written once
//     (attribute_not_exists) so a notice is decided once per user, bucket
//     and lead, however many dispatchers look.
//
// What holds:
//
//   - Order: a user's events reach an endpoint in version order. Only the
//     holder of a queue's claim (a conditional write with an expiry: the
//     mark of an idle queue, or a claim of a due one) sends its events,
//     one after another, each only after the previous one's 2xx or last
//     attempt; done moves only forward, by a write conditional on the
//     queue's record version as read (claims and redeliveries move it, a
//     mark of wanted does not: a release also requires wanted <= done).
//     A head that got no 2xx is put off, and nothing after it goes until
//     it does or is given up.
//   - Nothing lost: the stream consumer checkpoints a batch only after the
//     queues of its users record wanted; a queue's events are the entries
//     the stream handed over (as written: the same decoding) or else read
//     from the ledger (consistent reads), so a trimmed or lost stream
//     record delays nothing that a later record or a redelivery does not
//     recover.
//   - At least once, duplicates only as the same webhook-id: the 2xx of a
//     group (at most 50, at most 250 ms old) are put on the record
//     together, rows and done in one transaction; a crash before it sends
//     them again, never another event under its id, nor another body: an
//     event's entry is as it was written (a purchase's refunded_amount
//     and a grant's reversed_amount, which later entries move, read as 0).
//     Every attempt that got no 2xx is written before the next attempt
//     (a given-up one ends its group). So after a dispatcher dies, the
//     one that takes its queue over sends again, in version order, the
//     events it had sent since done was last written (one group at
//     most): a receiver that dedupes by webhook-id, as Standard Webhooks
//     asks, sees each user's events once and in version order. Writing
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
//     from the ledger.
//
// Wiring: New(db, webhooksTable, ledgerStore, Options{Sender, EncodeEntry:
// api.EntryJSON, Observer}) and go Run(ctx); the stream consumer calls
// Apply with each batch and checkpoints after it returns nil (Apply's
// marks claim idle queues for Run only while Run delivers); the API
// calls ListDeliveries and Redeliver, and waits EndpointRefresh before it
// answers a disable or a delete; the notice finder calls Notify. Several
// dispatchers may run on one table: claims share the queues.
package dispatch
