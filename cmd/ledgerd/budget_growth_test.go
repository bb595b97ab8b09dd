package main

import (
	"io"
	"testing"

	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// TestBudgetGrowthSetting: -budget-growth-throttles is the store's
// threshold for growing a throttled budget, 20 by default, 0 never (a
// negative threshold to the store); below 0 it stops the command.
func TestBudgetGrowthSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     string // LEDGER_BUDGET_GROWTH_THROTTLES
		want    int
		wantErr bool
	}{
		{name: "default", want: dynamo.DefaultBudgetGrowth.Throttles},
		{name: "variable", env: "5", want: 5},
		{name: "flag over variable", args: []string{"-budget-growth-throttles", "7"}, env: "5", want: 7},
		{name: "never", env: "0", want: -1},
		{name: "negative", args: []string{"-budget-growth-throttles", "-1"}, wantErr: true},
		{name: "not a number", env: "many", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(name string) string {
				if name == "LEDGER_BUDGET_GROWTH_THROTTLES" {
					return tt.env
				}
				return ""
			}
			c, err := serveFlags(tt.args, getenv, io.Discard)
			var growth dynamo.BudgetGrowth
			if err == nil {
				growth, err = c.budgetGrowth()
			}
			if tt.wantErr {
				if err == nil {
					t.Fatalf("budget growth %+v: no error", growth)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if growth.Throttles != tt.want || growth.Window != dynamo.DefaultBudgetGrowth.Window {
				t.Errorf("budget growth = %+v, want %d throttles within %v", growth, tt.want, dynamo.DefaultBudgetGrowth.Window)
			}
		})
	}
}
