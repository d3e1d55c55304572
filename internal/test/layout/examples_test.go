package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExamplesOwnTheirKeys checks that no two example programs share a
// policy name, and so a key, on one Redis: every policy an example builds
// (a core.Policy literal, or guard.WithName for a LimitBy function) is
// named "<example>-…" after its directory, with a literal the test can
// read. Run one example after another on one REDIS_URL, and none finds
// the other's counts.
func TestExamplesOwnTheirKeys(t *testing.T) {
	dirs, err := filepath.Glob("../../../examples/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 9 {
		t.Fatalf("%d examples found, want the 9 or more under examples/", len(dirs))
	}
	owner := map[string]string{} // policy name -> example
	for _, dir := range dirs {
		example := filepath.Base(dir)
		if example == "internal" {
			continue // the examples' shared set-up, which builds no policy
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, n := range policyNames(t, f) {
				found++
				switch {
				case n.name == "":
					t.Errorf("%s: a policy whose name is not a string literal: name it %q-… with a literal", n.pos, example)
				case !strings.HasPrefix(n.name, example+"-"):
					t.Errorf("%s: policy %q of example %s: name it %q-… so that no other example shares its keys", n.pos, n.name, example, example)
				case owner[n.name] != "" && owner[n.name] != example:
					t.Errorf("%s: policy %q is also example %s's", n.pos, n.name, owner[n.name])
				}
				owner[n.name] = example
			}
		}
		if found == 0 {
			if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
				t.Errorf("example %s: no policy found; does the test still read its code?", example)
			}
		}
	}
}

// policyName is a policy name found in an example, "" when it is not a
// string literal.
type policyName struct {
	name string
	pos  token.Position
}

// policyNames returns the names of the policies file builds: the Name
// of each core.Policy literal, and the guard.WithName of each LimitBy
// call (one without it is reported as unnamed, since its default name
// is the same in every program).
func policyNames(t *testing.T, file string) []policyName {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	literal := func(e ast.Expr) string {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				return s
			}
		}
		return ""
	}
	var out []policyName
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if !isSelector(n.Type, "core", "Policy") {
				return true
			}
			p := policyName{pos: fset.Position(n.Pos())}
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "Name" {
						p.name = literal(kv.Value)
					}
				}
			}
			out = append(out, p)
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "LimitBy") {
				return true
			}
			p := policyName{pos: fset.Position(n.Pos())}
			for _, arg := range n.Args {
				if c, ok := arg.(*ast.CallExpr); ok && isSelector(c.Fun, "guard", "WithName") && len(c.Args) == 1 {
					p.name = literal(c.Args[0])
				}
			}
			out = append(out, p)
		}
		return true
	})
	return out
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
