package main

import (
	"strings"
	"testing"
)

func TestUnsteady(t *testing.T) {
	timeline := func(oks ...int64) []Second {
		var tl []Second
		for i, ok := range oks {
			tl = append(tl, Second{T: float64(i), OK: ok})
		}
		return tl
	}
	for _, c := range []struct {
		name string
		tl   []Second
		want string // "" for steady, else a part of the note
	}{
		{"flat", timeline(500, 510, 490, 505, 495, 500, 502, 498), ""},
		{"within 15%", timeline(500, 500, 520, 540, 550, 560, 570, 570), ""},
		{"rising", timeline(250, 300, 400, 500, 600, 650, 700, 700), "275/s in the first quarter of the measurement, 700/s in the last"},
		{"falling", timeline(800, 800, 700, 600, 500, 400, 300, 300), "800/s in the first quarter of the measurement, 300/s in the last"},
		{"too short to say", timeline(100, 900, 100, 900, 100, 900, 100), ""},
		{"nothing in the first quarter", timeline(0, 0, 0, 10, 20, 30, 40, 50), "0/s in the first quarter of the measurement, 45/s in the last"},
		{"nothing at all", timeline(0, 0, 0, 0, 0, 0, 0, 0), ""},
	} {
		got := unsteady(c.tl)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: unsteady = %q, want %q", c.name, got, c.want)
		}
	}
}
