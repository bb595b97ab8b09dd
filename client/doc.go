// Package client calls ledgerd, pointledger's server, from Go.
//
// New gives the LedgerService and AdminService clients generated from
// proto/ (package github.com/pointledger/pointledger/gen/pointledger/v1),
// speaking Connect, gRPC or gRPC-Web, with a bearer token on every call and
// unary calls retried when their outcome is unknown:
//
//	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")))
//	res, err := c.Ledger.Purchase(ctx, connect.NewRequest(&pointledgerv1.PurchaseRequest{
//		UserId: "alice", Amount: "30.5", RequestId: client.NewRequestID(),
//	}))
//	switch client.ReasonOf(err) {
//	case client.ReasonInsufficientBalance: ...
//	}
//
// What it relies on, from the API's contract:
//
//   - Every mutation carries a request_id, unique per user. The same request
//     sent again is answered with the original result (replayed) or the
//     original refusal (IsReplayed), and writes nothing. So a call whose
//     outcome is unknown (aborted, unavailable, a deadline) is safe to send
//     again with the same request_id; the retry interceptor does that, with
//     the very same request message. Choose a request_id once per operation
//     (NewRequestID), keep it with the operation, and reuse it when you
//     retry yourself (after a crash, say); never make a new one for a retry.
//   - Every refusal carries a google.rpc.ErrorInfo whose reason is stable
//     and machine-readable: branch on ReasonOf, never on the message.
package client
