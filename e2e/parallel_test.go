package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEachTestSaysWhetherItRunsInParallel holds the package's rule (doc.go):
// every test starts with t.Parallel(), or with a "// Not parallel:" line
// that says why it runs alone.
func TestEachTestSaysWhetherItRunsInParallel(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	tests := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" || fn.Body == nil {
				continue
			}
			tests++
			if len(fn.Body.List) > 0 && isParallelCall(fn.Body.List[0]) {
				continue
			}
			if notParallelLine(f, fset, fn) {
				continue
			}
			t.Errorf("%s (%s): starts with neither t.Parallel() nor a \"// Not parallel:\" line saying why it runs alone",
				fn.Name.Name, fset.Position(fn.Pos()))
		}
	}
	if tests < 2 {
		t.Fatalf("found %d tests in %v: the check reads no files", tests, files)
	}
}

func isParallelCall(s ast.Stmt) bool {
	e, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	c, ok := e.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Parallel" && len(c.Args) == 0
}

// notParallelLine reports whether fn's body opens with a "// Not
// parallel:" comment, before its first statement.
func notParallelLine(f *ast.File, fset *token.FileSet, fn *ast.FuncDecl) bool {
	end := fn.Body.Rbrace
	if len(fn.Body.List) > 0 {
		end = fn.Body.List[0].Pos()
	}
	for _, cg := range f.Comments {
		if cg.Pos() > fn.Body.Lbrace && cg.End() <= end && strings.HasPrefix(cg.List[0].Text, "// Not parallel:") {
			return true
		}
	}
	return false
}
