// Package importer sends a file of credits to the ledger, one Grant a line:
// `ledgerd import` (issue 35; docs/operations.md, "Moving a program in").
//
// What holds:
//   - A line is whatever GrantRequest is: each line becomes one JSON object
//     (a CSV row: its header's columns as keys, metadata.<key> columns into
//     metadata) decoded by protojson into pb.GrantRequest, so a field added
//     to the proto is importable without a change here, and an unknown one
//     is refused with its line number.
//   - Every line sent has a request_id (its own, or <prefix>:<line>), so a
//     rerun replays what is done and a changed line under a used id is
//     refused (already_exists), never granted twice.
//   - The file is streamed: memory is bounded by the requests in flight, not
//     by the file's size.
//   - Outcomes are final or retried: a call whose outcome is unknown is sent
//     again under the same request_id by the Granter (the client's Retry);
//     whatever comes back is counted once, and a refusal goes, in the input's
//     format, to the rejects file.
//   - A cancelled context stops the reading: no new line is sent, the lines
//     in flight finish, and the Summary says where to resume.
//
// It imports no SDK and no store: it talks to ledgerd through its API.
package importer
