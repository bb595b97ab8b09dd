package main

import (
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: serve's collector runs at defaultGCPercent unless GOGC
// is set, which the runtime has then applied. Not parallel: the setting is
// the process's.
func TestSetGCPercent(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	tests := []struct {
		name string
		gogc string
		want int
	}{
		{name: "GOGC unset: serve's default", want: defaultGCPercent},
		{name: "GOGC set: left as the runtime read it", gogc: "100", want: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			setGCPercent(func(k string) string {
				if k == "GOGC" {
					return tt.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tt.want {
				t.Errorf("GC percent %d, want %d", got, tt.want)
			}
		})
	}
}
