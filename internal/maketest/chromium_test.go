package maketest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fake Debian of make chromium's tests: apt-cache, apt-get, dpkg-query
// and id answer from files in $FAKE_APT_STATE, and apt-get writes down how it
// was called. dpkg itself is the real one: make chromium compares versions
// with `dpkg --compare-versions`, and the comparison is part of what is tested.
var fakeDebian = map[string]string{
	// apt-cache policy chromium: the mirror's candidate, from the state's
	// candidate file ("(none)" without it).
	"apt-cache": `#!/bin/sh
[ "$1 $2" = "policy chromium" ] || { echo "fake apt-cache: unexpected $*" >&2; exit 2; }
echo "chromium:"
echo "  Installed: (none)"
echo "  Candidate: $(cat "$FAKE_APT_STATE/candidate" 2>/dev/null || echo '(none)')"
`,
	// apt-get update refreshes the lists: the candidate becomes the state's
	// candidate-after-update, if there is one.
	"apt-get": `#!/bin/sh
echo "$*" >> "$FAKE_APT_STATE/apt-get.log"
case "$1" in
update) if [ -f "$FAKE_APT_STATE/candidate-after-update" ]; then mv "$FAKE_APT_STATE/candidate-after-update" "$FAKE_APT_STATE/candidate"; fi ;;
install) ;;
*) echo "fake apt-get: unexpected $*" >&2; exit 2 ;;
esac
`,
	// dpkg-query -W -f='${db:Status-Status} ${Version}' chromium: the
	// state's installed file, "<status> <version>"; none, none installed.
	"dpkg-query": `#!/bin/sh
cat "$FAKE_APT_STATE/installed" 2>/dev/null || { echo "dpkg-query: no packages found matching chromium" >&2; exit 1; }
`,
	"id": `#!/bin/sh
[ "$1" = -u ] || { echo "fake id: unexpected $*" >&2; exit 2; }
cat "$FAKE_APT_STATE/uid"
`,
	// A browser of the developer's own, for CHROMIUM.
	"other-chrome": `#!/bin/sh
[ "$1" = --version ] && echo "Google Chrome 157.0.7000.1"
`,
}

// make chromium installs what the mirror offers when it is at least the
// minimum, whatever build that is: a Debian security update replaces the
// mirror's build, and the build must not break for it. It keeps a browser
// that is new enough, and fails, saying what to do, when the mirror has none.
func TestMakeChromium(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("make chromium compares versions with dpkg --compare-versions, and this system has no dpkg")
	}
	minimum := makefileVar(t, "CHROMIUM_MIN_VERSION")
	for _, tc := range chromiumCases(minimum) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runChromiumCase(t, tc)
		})
	}
}

// chromiumCase is a state of the fake Debian and what make chromium must do
// in it.
type chromiumCase struct {
	name        string
	state       map[string]string // files of $FAKE_APT_STATE
	env         []string
	wantErr     bool
	wantOut     []string // in what make printed
	wantAptGet  []string // apt-get's calls, in order
	wantNoPrint string   // not in what make printed
}

func chromiumCases(minimum string) []chromiumCase {
	const (
		offered = "156.0.8078.108-1~deb12u1" // not what any exact pin named
		older   = "150.0.7871.100-1~deb12u1" // bookworm's own, below the minimum
		stale   = "148.0.7778.167-1~deb12u1" // what stale lists offered
	)
	installOffered := "install -y -qq --no-install-recommends chromium=" + offered + " chromium-common=" + offered
	return []chromiumCase{
		{
			name:       "the mirror offers a newer build than any pin",
			state:      map[string]string{"uid": "0", "candidate": offered},
			wantOut:    []string{"chromium: using " + offered + " (minimum " + minimum + "), installed with apt-get ("},
			wantAptGet: []string{installOffered},
		},
		{
			name:       "stale lists: apt-get update first",
			state:      map[string]string{"uid": "0", "candidate": stale, "candidate-after-update": offered},
			wantOut:    []string{"chromium: using " + offered + " (minimum " + minimum + ")"},
			wantAptGet: []string{"update -qq", installOffered},
		},
		{
			name:       "stale lists that know no chromium",
			state:      map[string]string{"uid": "0", "candidate-after-update": offered},
			wantOut:    []string{"chromium: using " + offered},
			wantAptGet: []string{"update -qq", installOffered},
		},
		{
			name:       "installed, new enough, though not the mirror's",
			state:      map[string]string{"uid": "1000", "installed": "installed 156.0.8078.90-1~deb12u1", "candidate": offered},
			wantOut:    []string{"chromium: using 156.0.8078.90-1~deb12u1 (minimum " + minimum + ")"},
			wantAptGet: nil,
		},
		{
			name:       "installed but older than the minimum",
			state:      map[string]string{"uid": "0", "installed": "installed " + older, "candidate": offered},
			wantOut:    []string{"chromium: using " + offered},
			wantAptGet: []string{installOffered},
		},
		{
			name:       "removed, its configuration left",
			state:      map[string]string{"uid": "0", "installed": "config-files 156.0.8078.79-1~deb12u1", "candidate": offered},
			wantOut:    []string{"chromium: using " + offered},
			wantAptGet: []string{installOffered},
		},
		{
			name:    "the mirror offers only older ones",
			state:   map[string]string{"uid": "0", "candidate": older},
			wantErr: true,
			wantOut: []string{
				"chromium: chromium is not installed, and apt offers " + older + ", not " + minimum + " or newer: add Debian's security updates to apt's sources",
				"set CHROMIUM to a Chromium or Chrome binary",
			},
			wantAptGet:  []string{"update -qq"},
			wantNoPrint: "E: ",
		},
		{
			name:       "not root",
			state:      map[string]string{"uid": "1000", "candidate": offered},
			wantErr:    true,
			wantOut:    []string{"chromium: chromium is not installed, and installing it needs root: sudo make chromium (or set CHROMIUM to"},
			wantAptGet: nil,
		},
		{
			name:       "CHROMIUM names the browser",
			state:      map[string]string{"uid": "1000"},
			env:        []string{"CHROMIUM=other-chrome"},
			wantOut:    []string{"chromium: using other-chrome, from CHROMIUM: Google Chrome 157.0.7000.1"},
			wantAptGet: nil,
		},
	}
}

func runChromiumCase(t *testing.T, tc chromiumCase) {
	t.Helper()
	state := t.TempDir()
	for name, content := range tc.state {
		if err := os.WriteFile(filepath.Join(state, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runMake(t, clone(t), fakeBin(t, fakeDebian), append(tc.env, "FAKE_APT_STATE="+state), "chromium")
	if (err != nil) != tc.wantErr {
		t.Fatalf("make chromium: %v, want an error: %v; it said:\n%s", err, tc.wantErr, out)
	}
	for _, want := range tc.wantOut {
		if !strings.Contains(out, want) {
			t.Errorf("make chromium said:\n%s\nwant it to say %q", out, want)
		}
	}
	if tc.wantNoPrint != "" && strings.Contains(out, tc.wantNoPrint) {
		t.Errorf("make chromium said:\n%s\nwant nothing with %q", out, tc.wantNoPrint)
	}
	got := readLines(t, filepath.Join(state, "apt-get.log"))
	if strings.Join(got, "\n") != strings.Join(tc.wantAptGet, "\n") {
		t.Errorf("apt-get was called with\n%q\nwant\n%q", got, tc.wantAptGet)
	}
}

// Where there is no dpkg or apt-get, make chromium says to set CHROMIUM.
func TestMakeChromiumOffDebian(t *testing.T) {
	t.Parallel()
	// A PATH with bash (the Makefile's shell) and nothing else: no dpkg, no
	// apt-get.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(bash, filepath.Join(bin, "bash")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "chromium")
	cmd.Dir = clone(t)
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make chromium without dpkg succeeded:\n%s", out)
	}
	want := "this system has no dpkg or apt-get: install Chromium yourself, or set CHROMIUM to a Chromium or Chrome binary"
	if !strings.Contains(string(out), want) {
		t.Errorf("make chromium without dpkg said:\n%s\nwant %q", out, want)
	}
}
