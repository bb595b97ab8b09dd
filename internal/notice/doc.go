// Package notice decides the points.expiring notices (issue 24): a
// configured lead before a bucket of points expires (7 days by default;
// several leads allowed, such as 7 and 1 days), the user is told how many
// points in it will expire, with data {event_id, user_id, version,
// expire_time, amount, balance}. A Finder decides them and hands each to
// an Emit the dispatcher provides (noticedynamo is internal/notice/dynamo,
// which keeps the notices in the webhooks table; this package builds
// without the AWS SDK):
//
//	f, err := notice.New(ledgerStore, noticedynamo.NewTable(db, webhooksTable), leases, notice.Options{})
//	go f.Run(ctx, emit) // or f.Pass(ctx, emit), once
//
// What holds:
//
//   - No scan: candidates come from the ledger's index of next expiries
//     (the sweeper's, Store.DueUsers), asked for every user whose next
//     expiry is at or before now plus the longest lead. A user's next
//     expiry is never after any of their buckets', so a user with any
//     bucket within a lead is a candidate, even when that bucket is not
//     the next to expire. The index only nominates.
//   - Decided on a consistent read of the account, as it is at now
//     (Account.At): a bucket spent or held to nothing, or expired, gets
//     no notice; amount is what the bucket holds then, balance the
//     spendable balance then (as GetBalance answers it), version the
//     account's version read.
//   - Once per user, bucket and lead: the notice is written to the
//     webhooks table (PK "N#<user_id>", SK "<expire_time>#<lead>") under
//     attribute_not_exists before Emit is called, with its event id (a
//     ULID drawn then) and its event, so however many finders look, one
//     decides it. Of the leads a bucket is within, only the nearest is
//     decided, and none once a notice of that lead or a nearer one exists:
//     points granted a day before they expire get the one-day notice only.
//   - Not lost: the notice's emitted flag is set only after Emit returns
//     nil; a later pass that finds a notice not emitted emits it again,
//     the same event under the same id, while its bucket is still live
//     with points (a notice is never sent for a bucket spent or expired
//     since). Emit may thus see one event more than once; the dispatcher
//     keeps one delivery per event id.
//   - Shared by lease: the index's shards are taken one at a time under a
//     lease ("NOTICE#<shard>" in the lease table), renewed while the
//     shard is read, by the sweeper's pass (internal/shardpass), so that
//     several finders (one per ledgerd) do not read the same users at
//     once; the conditional write, not the lease, is what makes a notice
//     once.
//
// Cost: a pass reads the account of every user whose next expiry is
// within the longest lead, and the notices of those with a bucket within
// it (two consistent reads), whether or not anything is due; hence the
// 5-minute default interval, minutes being nothing beside a lead of days.
// A bucket that expires sooner than two intervals would escape the passes:
// the Follower (a stream handler beside the dispatcher) decides a user's
// notices as soon as a grant of such a bucket arrives.
package notice
