package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The README's limits (issue 31): what it is, the two commands, the tested
// quick start, the API at a glance and links into docs/ fit in these; the
// rest goes to docs/. Its words of prose are those `wc -w` counts once the
// fenced code blocks are taken out, tables and headings included:
//
//	awk '/^```/{c=!c;next} !c' README.md | wc -w
const (
	readmeMaxLines = 350
	readmeMaxWords = 1600
)

func TestReadmeFitsItsLimits(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines, words := readmeSize(string(b))
	if lines > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move details into docs/ and link them", lines, readmeMaxLines)
	}
	if words > readmeMaxWords {
		t.Errorf("README.md has %d words of prose, at most %d: move details into docs/ and link them", words, readmeMaxWords)
	}
	t.Logf("README.md: %d lines, %d words of prose", lines, words)
}

// readmeSize counts as wc -l does (newlines) and the words outside fenced
// code blocks as the awk | wc -w above does.
func readmeSize(text string) (lines, words int) {
	inCode := false
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasSuffix(line, "\n") {
			lines++
		}
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			words += len(strings.Fields(line))
		}
	}
	return lines, words
}

func TestReadmeSizeCounts(t *testing.T) {
	t.Parallel()
	text := "# Title\n\nTwo words.\n\n```sh\nnot counted at all\n```\n\n| a | b |\n"
	if lines, words := readmeSize(text); lines != 9 || words != 9 {
		t.Errorf("readmeSize = %d lines, %d words; want 9 and 9 (heading 2, prose 2, a table row 5, its bars words as wc -w counts them)", lines, words)
	}
}

// shellBlock is a command block of a Markdown page.
var shellBlock = regexp.MustCompile("(?s)```(?:sh|bash|shell)\n(.*?)```")

// portLiteral is a port in a command: after a loopback host, or bare
// (`-listen :8081`); one after another host (10.0.0.1:8080) is not make
// run's.
var portLiteral = regexp.MustCompile(`(localhost|127\.0\.0\.1|\[::1\]|0\.0\.0\.0|^|[\s'"=,(])(:\d{4,5})\b`)

// shellComment is a comment at the end of a command line.
var shellComment = regexp.MustCompile(`(?m)(^|\s)#[^\n]*`)

// TestReadmeAndDocsCommandsUseTheURLVariables: a command of the README,
// CONTRIBUTING.md, docs/ or examples/ reaches make run's ledgerd through
// $LEDGER_URL and its operations listener through $LEDGER_OPS_URL, which
// .local/dev.env sets, never at a fixed address: make run may serve on
// other ports (issue 31 found 16 commands at localhost:8080 and
// 127.0.0.1:9090). A literal loopback address is allowed only where the
// same block chooses it (a -listen or -ops-listen flag, a *_LISTEN, *_ADDR
// or *_PORT variable), and for the example receiver's own 127.0.0.1:9000.
func TestReadmeAndDocsCommandsUseTheURLVariables(t *testing.T) {
	t.Parallel()
	var pages []string
	for _, pattern := range []string{"README.md", "CONTRIBUTING.md", "docs/*.md", "examples/README.md", "examples/*/README.md"} {
		found, err := filepath.Glob(filepath.Join("../..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, found...)
	}
	if len(pages) < 8 {
		t.Fatalf("found %d pages, want README.md, CONTRIBUTING.md and docs/", len(pages))
	}
	blocks := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range shellBlock.FindAllStringSubmatchIndex(text, -1) {
			blocks++
			block := shellComment.ReplaceAllString(text[m[2]:m[3]], "$1")
			for _, lit := range portLiteral.FindAllStringSubmatch(block, -1) {
				port := strings.TrimPrefix(lit[2], ":")
				if portChosenIn(block, port) || (lit[1] == "127.0.0.1" && port == "9000") {
					continue
				}
				line := strings.Count(text[:m[2]], "\n") + 1
				t.Errorf("%s, the block at line %d: a command at %s%s; use $LEDGER_URL or $LEDGER_OPS_URL (from . .local/dev.env), or choose the address in the block",
					strings.TrimPrefix(page, "../../"), line, lit[1], lit[2])
			}
		}
	}
	if blocks < 20 {
		t.Fatalf("found %d command blocks; is the pattern still right?", blocks)
	}
}

// portChosenIn says whether block gives port to a listener it starts.
func portChosenIn(block, port string) bool {
	if _, err := strconv.Atoi(port); err != nil {
		return false
	}
	chosen := regexp.MustCompile(`(-listen|-ops-listen|_LISTEN|_LISTEN_ADDR|_ADDR|_PORT)[= ]['"]?(\S*:)?` + port + `\b`)
	return chosen.MatchString(block)
}

// docPages are the pages whose commands the tests hold to what they say.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/README.md"} {
		found, err := filepath.Glob(filepath.Join("../..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range found {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			pages[strings.TrimPrefix(p, "../../")] = string(b)
		}
	}
	return pages
}

var (
	anyBlock = regexp.MustCompile("(?s)```(\\w*)\n(.*?)```")
	// without names a field the prose says a command leaves out.
	without = regexp.MustCompile("without (?:a |an )?`(\\w+)`")
	// ordinalEntry is prose counting a user's entries ("alice's seventh
	// entry"); the receiver's line after it says the version.
	ordinalEntry = regexp.MustCompile(`(\w+)'s (first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth) entry`)
	ordinals     = map[string]int{"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
		"seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12}
)

// TestReadmeAndDocsProseMatchesTheCommands: the prose before a command says
// what the command does (issue 31 found a hold "without a `ttl`" passing
// "ttl":"900s", and "alice's seventh entry" above the receiver's
// "alice version 9"). A field the prose says is left out is not in the
// command, and an entry the prose counts is the version the receiver's
// lines after it show.
func TestReadmeAndDocsProseMatchesTheCommands(t *testing.T) {
	t.Parallel()
	counted := 0
	for name, text := range docPages(t) {
		blocks := anyBlock.FindAllStringSubmatchIndex(text, -1)
		prev := 0
		for i, m := range blocks {
			prose, lang, body := text[prev:m[0]], text[m[2]:m[3]], text[m[4]:m[5]]
			prev = m[1]
			if lang == "sh" {
				for _, w := range without.FindAllStringSubmatch(prose, -1) {
					if strings.Contains(body, `"`+w[1]+`":`) {
						t.Errorf("%s: the prose says %q, and the command passes %s:\n%s", name, w[0], w[1], body)
					}
				}
			}
			for _, o := range ordinalEntry.FindAllStringSubmatch(prose, -1) {
				// The receiver's lines are the next text block.
				var printed string
				for _, n := range blocks[i:] {
					if text[n[2]:n[3]] == "text" {
						printed = text[n[4]:n[5]]
						break
					}
				}
				want := o[1] + " version " + strconv.Itoa(ordinals[o[2]]) + " "
				if !strings.Contains(printed, want) {
					t.Errorf("%s: the prose says %q; the lines after it show:\n%swant %q", name, o[0], printed, want)
				}
				counted++
			}
		}
	}
	if counted == 0 {
		t.Error("no page counts a user's entries above the receiver's lines; is operations.md's receiver section still there?")
	}
}
