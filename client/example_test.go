package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/servetest"
)

// TestMain serves ledgerd's API in this process (package servetest, on the
// in-memory store, behind its authentication) and says where, as `make
// run`'s .local/dev.env does: LEDGER_URL, and a service token in TOKEN.
// The examples read them, and run as they would beside `make run`.
func TestMain(m *testing.M) {
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		log.Fatal(err)
	}
	srv, stop := servetest.Start(servetest.Options{Auth: a})
	for k, v := range map[string]string{"LEDGER_URL": srv.URL, "TOKEN": creds.ServiceToken, "ADMIN_TOKEN": creds.AdminToken} {
		if err := os.Setenv(k, v); err != nil {
			log.Fatal(err)
		}
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// A checkout: grant points, hold some for an order, capture part of the
// hold when the order ships, and read the balance.
func Example() {
	ctx := context.Background()
	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")))
	alice := "alice-" + client.NewRequestID() // a new user each run

	_, err := c.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{
		UserId: alice, Amount: "100", RequestId: client.NewRequestID(),
	}))
	if err != nil {
		log.Fatal(err)
	}
	hold, err := c.Ledger.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{
		UserId: alice, Amount: "40", RequestId: client.NewRequestID(),
		OrderId: "order-43", Ttl: durationpb.New(15 * time.Minute),
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held", hold.Msg.Held, "of", hold.Msg.Balance, "available", hold.Msg.Available)

	capture, err := c.Ledger.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{
		UserId: alice, HoldRequestId: hold.Msg.Hold.RequestId, Amount: "25", RequestId: client.NewRequestID(),
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("captured", capture.Msg.Hold.CapturedAmount, "for", capture.Msg.Hold.OrderId)

	balance, err := c.Ledger.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: alice}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", balance.Msg.Balance, "available", balance.Msg.Available, "held", balance.Msg.Held)
	// Output:
	// held 40 of 100 available 60
	// captured 25 for order-43
	// balance 75 available 75 held 0
}

// Branch on the reason of a refusal, never on its message.
func ExampleReasonOf() {
	ctx := context.Background()
	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")))
	bob := "bob-" + client.NewRequestID()

	_, err := c.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: bob, Amount: "10", RequestId: client.NewRequestID()}))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: bob, Amount: "500", RequestId: client.NewRequestID()}))
	switch client.ReasonOf(err) {
	case "":
		fmt.Println("bought, or failed without a reason:", err)
	case client.ReasonInsufficientBalance:
		fmt.Println(connect.CodeOf(err), client.ReasonOf(err))
	case client.ReasonAccountFrozen:
		fmt.Println("frozen")
	default:
		fmt.Println("refused:", err)
	}
	// Output: failed_precondition INSUFFICIENT_BALANCE
}

// A refusal is final for its request_id: the same request sent again (after
// a timeout, say) gets the same refusal, marked replayed, and is not tried
// anew.
func ExampleIsReplayed() {
	ctx := context.Background()
	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")))
	purchase := &pb.PurchaseRequest{UserId: "carol-" + client.NewRequestID(), Amount: "5", RequestId: client.NewRequestID()}

	_, err := c.Ledger.Purchase(ctx, connect.NewRequest(purchase))
	fmt.Println(client.ReasonOf(err), client.IsReplayed(err))
	_, err = c.Ledger.Purchase(ctx, connect.NewRequest(purchase))
	fmt.Println(client.ReasonOf(err), client.IsReplayed(err))
	// Output:
	// INSUFFICIENT_BALANCE false
	// INSUFFICIENT_BALANCE true
}

// One request_id per operation: a retry of the operation, by the client's
// retries or by you after a crash, sends the same one, so that the ledger
// applies it once.
func ExampleNewRequestID() {
	ctx := context.Background()
	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")))
	grant := &pb.GrantRequest{UserId: "dora-" + client.NewRequestID(), Amount: "10", RequestId: client.NewRequestID()}

	for range 2 {
		res, err := c.Ledger.Grant(ctx, connect.NewRequest(grant))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("balance", res.Msg.Balance, "replayed", res.Msg.Replayed)
	}
	// Output:
	// balance 10 replayed false
	// balance 10 replayed true
}

// gRPC (or gRPC-Web) instead of Connect: the same calls, on the same port.
func ExampleWithProtocol() {
	ctx := context.Background()
	for _, p := range []client.Protocol{client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolGRPCWeb} {
		c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")), client.WithProtocol(p))
		_, err := c.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{
			UserId: "erin-" + client.NewRequestID(), Amount: "5", RequestId: client.NewRequestID(),
		}))
		fmt.Println(connect.CodeOf(err), client.ReasonOf(err))
	}
	// Output:
	// failed_precondition INSUFFICIENT_BALANCE
	// failed_precondition INSUFFICIENT_BALANCE
	// failed_precondition INSUFFICIENT_BALANCE
}

// Retries: more attempts, and a bound on each, so that one slow attempt
// leaves time for another within the caller's deadline.
func ExampleWithRetry() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client.New(os.Getenv("LEDGER_URL"), client.WithToken(os.Getenv("TOKEN")), client.WithRetry(client.RetryPolicy{
		MaxAttempts:    6,
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     2 * time.Second,
		AttemptTimeout: 3 * time.Second,
	}))
	res, err := c.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{
		UserId: "finn-" + client.NewRequestID(), Amount: "12.5", RequestId: client.NewRequestID(),
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", res.Msg.Balance)
	// Output: balance 12.5
}

// The generated clients with connect-go's own options: the token and the
// retries are interceptors of their own.
func ExampleBearer() {
	ctx := context.Background()
	admin := pointledgerv1connect.NewAdminServiceClient(http.DefaultClient, os.Getenv("LEDGER_URL"),
		connect.WithInterceptors(client.Retry(client.DefaultRetryPolicy), client.Bearer(os.Getenv("ADMIN_TOKEN"))))
	_, err := admin.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{
		UserId: "gina-" + client.NewRequestID(), Status: pb.AccountStatus_ACCOUNT_STATUS_FROZEN, Reason: "chargeback review",
	}))
	fmt.Println(connect.CodeOf(err), client.ReasonOf(err))
	// Output: not_found ACCOUNT_NOT_FOUND
}
