// Package sizecheck holds the repository's size rule (issue 31) as a test:
// no function under internal/ over maxFuncLines lines, no file over
// maxFileLines lines.
//
// How it counts: a function's length is the lines from its body's opening
// brace to its closing brace inclusive, for every FuncDecl and FuncLit
// (go/ast, positions from go/token); a file's length is what `wc -l` says,
// its newline characters. Test files are held to the rule as all others:
// there are no exceptions.
package sizecheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	maxFuncLines = 100
	maxFileLines = 700
)

// TestSizes walks every .go file under internal/ and reports each function
// and file over the rule.
func TestSizes(t *testing.T) {
	root := filepath.Join("..", "..")
	var problems []string
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		p, err := check(rel, src)
		problems = append(problems, p...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// check reports what in the file at rel (its path from the repository's
// root, with slashes), whose source is src, breaks the rule.
func check(rel string, src []byte) ([]string, error) {
	var problems []string
	lines := bytes.Count(src, []byte("\n"))
	if lines > maxFileLines {
		problems = append(problems, fmt.Sprintf("%s: %d lines, over %d: split it along its concerns", rel, lines, maxFileLines))
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return problems, err
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		var name string
		switch fn := n.(type) {
		case *ast.FuncDecl:
			body, name = fn.Body, fn.Name.Name
		case *ast.FuncLit:
			body, name = fn.Body, "func literal"
		}
		if body == nil {
			return true
		}
		start := fset.Position(body.Lbrace)
		if n := fset.Position(body.Rbrace).Line - start.Line + 1; n > maxFuncLines {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %d lines, over %d", rel, start.Line, name, n, maxFuncLines))
		}
		return true
	})
	return problems, nil
}

// TestCheckCounts proves the checker can fail: a function of 101 lines (its
// body's braces included) and a file of 701, test files included, are
// reported; 100 and 700 are not.
func TestCheckCounts(t *testing.T) {
	// source is a file of a function whose body spans bodyLines lines,
	// padded with comment lines to fileLines lines.
	source := func(bodyLines, fileLines int) []byte {
		var b strings.Builder
		b.WriteString("package p\n\nfunc f() {\n")
		for range bodyLines - 2 {
			b.WriteString("\t_ = 0\n")
		}
		b.WriteString("}\n")
		for n := 2 + bodyLines; n < fileLines; n++ {
			b.WriteString("//\n")
		}
		return []byte(b.String())
	}
	// literal is a file of a function literal whose body spans bodyLines.
	literal := func(bodyLines int) []byte {
		var b strings.Builder
		b.WriteString("package p\n\nvar f = func() {\n")
		for range bodyLines - 2 {
			b.WriteString("\t_ = 0\n")
		}
		b.WriteString("}\n")
		return []byte(b.String())
	}
	for _, c := range []struct {
		name, rel string
		src       []byte
		want      int
	}{
		{"function of 100", "internal/p/p.go", source(100, 200), 0},
		{"function of 101", "internal/p/p.go", source(101, 200), 1},
		{"function of 101 in a test file", "internal/p/p_test.go", source(101, 200), 1},
		{"function literal of 101", "internal/p/p_test.go", literal(101), 1},
		{"file of 700", "internal/p/p.go", source(10, 700), 0},
		{"file of 701", "internal/p/p.go", source(10, 701), 1},
		{"test file of 700", "internal/p/p_test.go", source(10, 700), 0},
		{"test file of 701", "internal/p/p_test.go", source(10, 701), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := bytes.Count(c.src, []byte("\n")); c.want == 0 && got > maxFileLines {
				t.Fatalf("bad case: %d lines", got)
			}
			problems, err := check(c.rel, c.src)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != c.want {
				t.Errorf("got %d problems, want %d: %q", len(problems), c.want, problems)
			}
		})
	}
}
