// Package hygiene checks the repository's tests for two habits that make a
// test pass or hang for the wrong reason:
//
//   - failing the test from a goroutine it started: t.Fatal, t.FailNow and
//     t.Skip end only the goroutine that calls them (testing's rule), so
//     the test goes on or hangs until the global timeout, and a helper that
//     is handed t inside such a goroutine does the same;
//   - sleeping: a sleep used to wait for something is a race with that
//     thing (poll a condition with a deadline or wait on a channel). A sleep
//     that lets time pass on purpose (a session timeout must elapse before
//     the test checks that nothing happened) says so on its line with
//     "// time passes: why".
//
// The check parses every _test.go file of the module (no type checking):
// inside a `go` statement's function literal it flags calls of Fatal,
// Fatalf, FailNow, Skip, Skipf and SkipNow, and calls that pass t or tb
// (the test's handle, by this repository's naming, or a field t of a
// harness) to another function.
// A line may opt out with "// hygiene: why", for the rare helper that is
// safe with t in a goroutine (it only calls t.Error and t.Log).
//
// mutants_test.go checks that every mutant of test/mutants still applies
// to the code, so a moved function fails make test, not only the
// mutation suite.
package hygiene

import (
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

var fatalMethods = []string{"Fatal", "Fatalf", "FailNow", "Skip", "Skipf", "SkipNow"}

// moduleRoot is the directory holding go.mod, above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// testFiles lists the module's _test.go files, skipping generated code and
// testdata.
func testFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "gen", "testdata", "bin", "data", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d test files under %s; the walk is wrong", len(files), root)
	}
	return files
}

// finding is one flagged line.
type finding struct {
	pos  token.Position
	what string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.pos.Filename, f.pos.Line, f.what) }

// check parses one file and returns what it flags.
func check(fset *token.FileSet, path string, src any) ([]finding, error) {
	file, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	// The comments on each line, for the opt-outs.
	comments := map[int]string{}
	for _, cg := range file.Comments {
		for _, c := range cg.List {
			comments[fset.Position(c.Slash).Line] += c.Text
		}
	}
	optedOut := func(pos token.Pos, marker string) bool {
		return strings.Contains(comments[fset.Position(pos).Line], marker)
	}
	var out []finding
	flag := func(pos token.Pos, what string) {
		out = append(out, finding{fset.Position(pos), what})
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			lit, ok := n.Call.Fun.(*ast.FuncLit)
			if !ok {
				return true
			}
			ast.Inspect(lit.Body, func(m ast.Node) bool {
				call, ok := m.(*ast.CallExpr)
				if !ok || optedOut(call.Pos(), "// hygiene:") {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && slices.Contains(fatalMethods, sel.Sel.Name) {
					if isTestHandle(sel.X) {
						flag(call.Pos(), fmt.Sprintf("%s.%s in a goroutine ends only that goroutine, not the test", exprString(sel.X), sel.Sel.Name))
					}
					return true
				}
				for _, arg := range call.Args {
					if isTestHandle(arg) {
						flag(call.Pos(), fmt.Sprintf("%s handed to %s in a goroutine: a Fatal there ends only the goroutine", exprString(arg), exprString(call.Fun)))
					}
				}
				return true
			})
		case *ast.CallExpr:
			if exprString(n.Fun) == "time.Sleep" && !optedOut(n.Pos(), "// time passes:") {
				flag(n.Pos(), "time.Sleep without a \"// time passes: why\" note: wait for a condition instead")
			}
		}
		return true
	})
	return out, nil
}

// isTestHandle reports whether e names a test's handle: t or tb, or a
// field t of something (h.t, a harness's copy of it).
func isTestHandle(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "t" || e.Name == "tb"
	case *ast.SelectorExpr:
		return e.Sel.Name == "t" || e.Sel.Name == "tb"
	}
	return false
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

func TestTests_NoFatalInGoroutinesNoUnexplainedSleeps(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var all []finding
	for _, path := range testFiles(t, root) {
		found, err := check(fset, path, nil)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		all = append(all, found...)
	}
	for _, f := range all {
		rel, _ := filepath.Rel(root, f.pos.Filename)
		t.Errorf("%s:%d: %s", rel, f.pos.Line, f.what)
	}
}

// The checker itself: each habit is flagged in a crafted file, and the
// sanctioned forms are not.
func TestCheck_FlagsEachHabitAndSparesTheSanctionedForms(t *testing.T) {
	const src = `package x

import (
	"testing"
	"time"
)

func helper(t *testing.T) {}

func TestX(t *testing.T) {
	go func() {
		t.Fatalf("boom")
	}()
	go func() {
		helper(t)
	}()
	go func() {
		h.t.FailNow()
	}()
	go func() {
		t.Errorf("fine")
		helper(t) // hygiene: helper only logs
	}()
	time.Sleep(time.Second)
	time.Sleep(time.Second) // time passes: the session must expire
	t.Fatal("fine: the test's own goroutine")
}
`
	found, err := check(token.NewFileSet(), "x_test.go", src)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, f := range found {
		lines = append(lines, f.pos.Line)
	}
	if want := []int{12, 15, 18, 24}; !slices.Equal(lines, want) {
		t.Fatalf("flagged lines %v (%v), want %v", lines, found, want)
	}
}
