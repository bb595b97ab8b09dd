// Package stream reads the ledger table's DynamoDB stream and hands each
// batch of new ledger entries to a Handler: the projection's history, the
// webhook dispatcher's queues, or both through FanOut. A Consumer has a
// name; consumers of one name share the stream's shards by lease, and
// consumers of two names each read every shard, with leases and
// checkpoints of their own in one lease table.
//
// What holds, for the consumers of one name:
//
//   - Lease: a shard is read by the one consumer holding its lease. A
//     lease item has an owner, an expiry and a record version number
//     (rvn); every write to it (take-over, heartbeat every TTL/3,
//     checkpoint, release) is conditional on the rvn it read, and on the
//     owner for the holder's own writes, so an owner that lost its lease
//     cannot write over its successor, and a lease is taken over only once
//     it has expired.
//   - Parent before child: a shard is read only after its parent shard is
//     finished, so a user's entries reach the handler in stream order.
//   - Checkpoint after apply: a batch's checkpoint is written only after
//     the handler's Apply returned nil. A crash, a failed Apply or a
//     takeover reads records again, never skips them; so a handler must
//     be idempotent, and with FanOut each of its handlers.
//   - Catch-up: records the stream no longer has (a checkpoint older than
//     its 24 hours, a parent trimmed before it was finished, a stream that
//     keeps answering "trimmed") are read from the ledger itself by a
//     handler that is a CatchUpper. The request is recorded in the lease
//     table before the consumer reads on past the loss, and cleared only
//     once a catch-up has finished, so it outlives a consumer that stops
//     in between. A handler that cannot catch up gets the loss logged.
//
// Lease-table keys: "<name>#SHARD#<shard>" and "<name>#CATCHUP#<table>";
// the projection's (ProjectionName) keep the form they had before
// consumers had names, "SHARD#<shard>" and "CATCHUP#<table>". The lease
// table also lends its leases as locks (LeaseTable.Lock), which keep
// reconciliations from overlapping, and to the expiry sweeper.
package stream
