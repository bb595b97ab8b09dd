package main

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/loadtest/check"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// prepareKinds gives a kinds run's parameters the PointKindService its
// setup creates the program's kinds with: ledgerd at url, with the admin
// token of the ledgerd the load test started.
func prepareKinds(p *drive.Params, hc *http.Client, url, adminToken string) {
	p.Kinds = &drive.Kinds{Admin: pointledgerv1connect.NewPointKindServiceClient(hc, url, connect.WithInterceptors(client.Bearer(adminToken)))}
}

// checkKinds checks a kinds run's draws and per-kind balances (against
// ledgerd's GetBalance through api) and puts its kinds section on the
// run as reported.
func checkKinds(ctx context.Context, chk *check.Checker, store *dynamo.Ledger, api pointledgerv1connect.LedgerServiceClient, p *drive.Params, b *check.Book, reported *report.Run, inv *report.Invariants) error {
	ks, err := store.Kinds(ctx)
	if err != nil {
		return err
	}
	k, err := chk.Kinds(ctx, ks, api, b.Users(), p.Kinds.Refusals(), inv)
	if err != nil {
		return err
	}
	reported.Kinds = k
	return nil
}
