// Package dynamo keeps the dispatcher's endpoints, queues, delivery rows
// and notices' rows in DynamoDB: it implements dispatch.Store on the
// "webhooks" table (migrations/). It decides nothing: every write is
// conditional on what the dispatcher read, and package dispatch decides
// what to write.
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
//     start again, until its holder takes it into account. A queue is
//     deleted when its holder releases it with nothing more wanted
//     (conditional on its rvn and wanted <= done): a user without one is
//     sent its events directly, and one BatchGetItem of a stream batch's
//     queues tells which users have one (those the dispatcher does not
//     remember without one). An endpoint's redeliveries attribute counts
//     the redeliveries asked of it (ADD, with its rvn): the fence of that
//     memory.
//   - Packs: the events answered 2xx at the first attempt of their round
//     (dispatch's pack.go), many to an item, with no row of their own: PK
//     "S#<endpoint_id>", SK "<highest event id>#<a new ULID>", lo (the
//     lowest event id), users (a string set) and ev, the events as text,
//     one a line (user, version, event id, type, attempt time and
//     duration in ns, status; tab-separated). A pack's events are less
//     than dispatch.PackSpan apart (event ids are ULIDs: time-ordered),
//     at most dispatch.PackMost, so the packs holding event X are found by
//     one consistent Query, SK from X to PackSpan after it, lo <= X
//     (PackedOf); every user's listing reads the partition backwards
//     (Packs), and a redelivery to every user reads its users, from
//     start_time's ULID prefix if it gives one. Direct sends put theirs
//     with a BatchWriteItem; a queue's group puts its packs in the
//     transaction that moves done. Written once, never updated.
//   - A delivery row per endpoint and event with a failed attempt in its
//     round (and per notice): PK "D#<endpoint_id>#<user_id>",
//     SK "V#<version, zero-padded>" (a notice: "N#<event id>": Notify is
//     handed the event, whose id the notice finder makes once per user,
//     bucket and lead, so it names the notice as well), with the event id,
//     type, state (PENDING, SUCCEEDED, FAILED), attempts, last status
//     code, last error and next attempt time; delivery_endpoint + event_id
//     index it by endpoint for ListWebhookDeliveries (and, with the
//     queues and the packs, names the users a redelivery to every user
//     sends to). An event sent directly that got no 2xx has its row
//     written with the batch's other rows, a BatchWriteItem of each 25
//     (put whole: no transaction). A queued entry's row is written, from
//     the queue's count, in the same transaction as the queue's done (its
//     2xx after a failed attempt) or its failed head, so a
//     redelivered event's row starts its count again at its next
//     attempt; the write is an Update that appends the attempt to
//     attempt_log (a list of {t, s, e, d}: time, status, error,
//     duration), which a redelivery does not reset, conditional on the
//     list being shorter than dispatch.MaxAttemptLog (a full one loses
//     its oldest attempt first, rowUpdate and trimLog).
//     A notice's delivery row is its own queue of one event: while PENDING
//     it carries due_shard and due_time, its data and time, and a claim,
//     and it is attempted outside the user's version order.
//   - Notices: PK "N#<user_id>", SK "<expire_time>#<lead>", written once
//     (attribute_not_exists) so a notice is decided once per user, bucket
//     and lead, however many dispatchers look.
package dynamo
