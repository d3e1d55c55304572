package docsnippets_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// ======================================================================
// PENDING PACKAGES. The docs already use these packages, which do not
// exist yet: a snippet that mentions one (as "name.") is parsed but not
// compiled. Delete an entry once its package lands, and the snippets
// that use it are compiled like every other.
var pendingPackages = []string{}

// ======================================================================

// importPaths are the packages snippets may use without importing them:
// a snippet that is not a whole file gets the imports of the names it
// uses (a name followed by a dot).
var importPaths = map[string]string{
	"core":         "github.com/ratekit/ratekit/core",
	"guard":        "github.com/ratekit/ratekit/guard",
	"keyfunc":      "github.com/ratekit/ratekit/keyfunc",
	"personal":     "github.com/ratekit/ratekit/keyfunc/personal",
	"nethttp":      "github.com/ratekit/ratekit/nethttp",
	"ginlimit":     "github.com/ratekit/ratekit/ginlimit",
	"echolimit":    "github.com/ratekit/ratekit/echolimit",
	"fiberlimit":   "github.com/ratekit/ratekit/fiberlimit",
	"grpclimit":    "github.com/ratekit/ratekit/grpclimit",
	"opshttp":      "github.com/ratekit/ratekit/opshttp",
	"ratekitprom":  "github.com/ratekit/ratekit/ratekitprom",
	"ratekitotel":  "github.com/ratekit/ratekit/ratekitotel",
	"ratekitslog":  "github.com/ratekit/ratekit/ratekitslog",
	"ratekittest":  "github.com/ratekit/ratekit/ratekittest",
	"redisstore":   "github.com/ratekit/ratekit/redisstore",
	"rueidisstore": "github.com/ratekit/ratekit/rueidisstore",
	"rueidis":      "github.com/redis/rueidis",
	"redis":        "github.com/redis/go-redis/v9",
	"gin":          "github.com/gin-gonic/gin",
	"echo":         "github.com/labstack/echo/v4",
	"fiber":        "github.com/gofiber/fiber/v2",
	"grpc":         "google.golang.org/grpc",
	"codes":        "google.golang.org/grpc/codes",
	"chi":          "github.com/go-chi/chi/v5",
	"prometheus":   "github.com/prometheus/client_golang/prometheus",
	"promhttp":     "github.com/prometheus/client_golang/prometheus/promhttp",
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"httptest":     "net/http/httptest",
	"io":           "io",
	"log":          "log",
	"net":          "net",
	"netip":        "net/netip",
	"os":           "os",
	"slog":         "log/slog",
	"strings":      "strings",
	"testing":      "testing",
	"time":         "time",
}

// prelude is in scope of every snippet that is not a whole file: what
// the docs take for granted in the reader's program, a context, a
// go-redis client and the router of each framework. Anything else a
// snippet uses it declares, or names in an HTML comment just before its
// fence, invisible on the rendered page but reviewed with the text:
//
//	<!-- go: r chi.Router; getUser http.HandlerFunc -->
const prelude = `
var (
	ctx = context.Background()
	rdb = redis.NewClient(&redis.Options{})
	mux = http.NewServeMux()
	r   = gin.New()
	e   = echo.New()
	app = fiber.New()
)
`

// preludeImports are the imports of the prelude.
var preludeImports = []string{"context", "redis", "http", "gin", "echo", "fiber"}

// snippet is one Go code block of a Markdown file.
type snippet struct {
	file    string // relative to the module root
	line    int    // of the block's first line of code
	code    string // its lines, their common indentation removed
	context string // the declarations of a <!-- go: ... --> comment
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// markdownFiles returns README.md and docs/*.md, relative to root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	return files
}

var contextComment = regexp.MustCompile(`^\s*<!--\s*go:(.*)-->\s*$`)

// extract returns the ```go blocks of file.
func extract(t *testing.T, root, file string) []snippet {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out     []snippet
		cur     *snippet
		lines   []string
		indent  string
		prev    string
		lineNum int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &snippet{file: file, line: lineNum + 1}
			indent = line[:strings.Index(line, "```")]
			if m := contextComment.FindStringSubmatch(prev); m != nil {
				cur.context = strings.TrimSpace(m[1])
			}
			lines = nil
		case cur != nil && trimmed == "```":
			cur.code = strings.Join(lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
		if trimmed != "" {
			prev = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: a ```go block is not closed", cur)
	}
	return out
}

// usedNames returns the identifiers of code followed by a dot, outside
// comments and strings: the package names it may use.
func usedNames(code string) map[string]bool {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(code)
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, func(token.Position, string) {}, 0)
	names := map[string]bool{}
	prevIdent, prevDot := "", false
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return names
		}
		if tok == token.PERIOD && prevIdent != "" && !prevDot {
			names[prevIdent] = true
		}
		prevDot = tok == token.PERIOD
		prevIdent = ""
		if tok == token.IDENT {
			prevIdent = lit
		}
	}
}

// pending returns the pending package s uses, "" when none.
func (s snippet) pending() string {
	used := usedNames(s.code)
	for _, p := range pendingPackages {
		if used[p] {
			return p
		}
	}
	return ""
}

// wholeFile reports whether s is a whole file (a package clause) or
// declares functions, which only a file can hold.
func (s snippet) wholeFile() (pkgClause, file bool) {
	for _, l := range strings.Split(s.code, "\n") {
		switch {
		case strings.HasPrefix(l, "package "):
			return true, true
		case strings.HasPrefix(l, "func "):
			file = true
		}
	}
	return false, file
}

// contextVars returns the declarations of s's context comment, "name
// Type" separated by ";".
func (s snippet) contextVars(t *testing.T) [][2]string {
	var out [][2]string
	for _, d := range strings.Split(s.context, ";") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		name, typ, ok := strings.Cut(d, " ")
		if !ok {
			t.Errorf("%s: context %q: want \"name Type\"", s, d)
			continue
		}
		out = append(out, [2]string{name, strings.TrimSpace(typ)})
	}
	return out
}

// imports returns the import block for the names code uses.
func imports(code string, extra ...string) string {
	used := usedNames(code)
	for _, e := range extra {
		used[e] = true
	}
	var paths []string
	for name := range used {
		if p, ok := importPaths[name]; ok {
			paths = append(paths, fmt.Sprintf("%s %q", name, p))
		}
	}
	sort.Strings(paths)
	return "import (\n\t" + strings.Join(paths, "\n\t") + "\n)\n"
}

// TestSnippetsCompile compiles every Go snippet of README.md and
// docs/*.md, so that none can rot:
//   - a block with a package clause is compiled as the file it is, alone
//     in its package (the README's first program, as pasted);
//   - a block that declares functions is compiled as a file of its own
//     package, with the imports of the names it uses;
//   - any other block is compiled as the body of a function, with those
//     imports and the names of prelude in scope: as if pasted into a
//     program that has them. Its own names must all be used.
//
// The names a block uses beyond those can be declared in an HTML comment
// just before its fence (see prelude). Blocks that use a pending package
// (pendingPackages) are only parsed. Errors point at the Markdown line.
func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	gen, err := os.MkdirTemp("testdata", "gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(gen) })

	bodies := filepath.Join(gen, "bodies")
	if err := os.MkdirAll(bodies, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bodies, "prelude.go"), "package bodies\n\n"+imports("", preludeImports...)+prelude)

	pkgs := []string{"./" + filepath.ToSlash(bodies)}
	n, skipped := 0, 0
	for _, file := range markdownFiles(t, root) {
		for _, s := range extract(t, root, file) {
			n++
			directive := fmt.Sprintf("//line %s:%d\n", filepath.Join(root, s.file), s.line)
			if p := s.pending(); p != "" {
				skipped++
				// Parsed at least: a syntax error shows now, not when
				// the package lands.
				src := s.code
				if clause, _ := s.wholeFile(); !clause {
					src = "package p\nfunc _() {\n" + directive + s.code + "}\n"
					if _, file := s.wholeFile(); file {
						src = "package p\n" + directive + s.code
					}
				}
				if _, err := parser.ParseFile(token.NewFileSet(), s.String(), src, 0); err != nil {
					t.Errorf("%s (uses pending package %s): %v", s, p, err)
				}
				continue
			}
			clause, file := s.wholeFile()
			name := fmt.Sprintf("s%03d", n)
			switch {
			case clause:
				dir := filepath.Join(gen, name)
				_ = os.MkdirAll(dir, 0o755)
				write(filepath.Join(dir, "main.go"), directive+s.code)
				pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
			case file:
				dir := filepath.Join(gen, name)
				_ = os.MkdirAll(dir, 0o755)
				var decls strings.Builder
				for _, v := range s.contextVars(t) {
					fmt.Fprintf(&decls, "var %s %s\n", v[0], v[1])
				}
				write(filepath.Join(dir, "snippet.go"), "package "+name+"\n\n"+imports(decls.String()+s.code)+decls.String()+directive+s.code)
				pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
			default:
				var decls strings.Builder
				for _, v := range s.contextVars(t) {
					fmt.Fprintf(&decls, "\tvar %s %s\n\t_ = %s\n", v[0], v[1], v[0])
				}
				write(filepath.Join(bodies, name+".go"), "package bodies\n\n"+imports(decls.String()+s.code)+
					"\nfunc _() {\n"+decls.String()+directive+s.code+"}\n")
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go snippets found")
	}
	t.Logf("%d snippets: %d compiled, %d only parsed (pending packages %v)", n, n-skipped, skipped, pendingPackages)
	cmd := exec.Command("go", append([]string{"build", "-o", os.DevNull}, pkgs...)...)
	if len(pkgs) > 1 {
		cmd = exec.Command("go", append([]string{"build"}, pkgs...)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the docs' Go snippets do not compile:\n%s", out)
	}
}

// TestNoGoDocExamples: go doc never shows Example functions, so the docs
// point to the example files or pkg.go.dev instead.
func TestNoGoDocExamples(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	re := regexp.MustCompile("go doc[^`\n]*Example")
	for _, file := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if m := re.Find(b); m != nil {
			t.Errorf("%s: %q: go doc does not show Examples; name the _test.go file or the pkg.go.dev page", file, m)
		}
	}
}

// TestReadmeFrontPage: the README opens with a complete program (a go get
// line, then a package main block), stays a front page, and links to
// the depth in docs/.
func TestReadmeFrontPage(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep the front page under 250, the depth in docs/", n)
	}
	first := extract(t, root, "README.md")
	getLine := strings.Index(readme, "go get github.com/ratekit/ratekit")
	if len(first) == 0 || !strings.HasPrefix(first[0].code, "package main") || getLine < 0 || getLine > strings.Index(readme, "```go") {
		t.Error("README.md does not open with `go get github.com/ratekit/ratekit` and a complete program (a package main block)")
	}
	for _, cmd := range []string{"make run", "make test"} {
		if !strings.Contains(readme, cmd) {
			t.Errorf("README.md lost the newcomer command %q", cmd)
		}
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// anchors returns the GitHub anchors of the headings of a Markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				slug.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				slug.WriteRune(r)
			}
		}
		out[slug.String()] = true
	}
	return out
}

// TestLinks: every relative link of README.md and docs/*.md names a file
// that exists and, with a #fragment, a heading of it.
func TestLinks(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	for _, file := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(link, "#")
			path := filepath.Join(root, file)
			if target != "" {
				path = filepath.Join(filepath.Dir(path), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no such file", file, link)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
				t.Errorf("%s: link %q: no such heading", file, link)
			}
		}
	}
}

// TestReadmeProgram runs the README's first program, as pasted but for
// its port, and checks what the README says it answers: five 200s, then
// 429 with Retry-After 10, X-Ratelimit-Limit 5 and X-Ratelimit-Remaining 0.
func TestReadmeProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	root, _ := filepath.Abs("../../..")
	blocks := extract(t, root, "README.md")
	const addr = "127.0.0.1:8080"
	if len(blocks) == 0 || !strings.Contains(blocks[0].code, addr) {
		t.Fatalf("README.md's first program does not listen on %s", addr)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := lis.Addr().String()
	_ = lis.Close()
	// Built inside the module, under testdata, as TestSnippetsCompile does.
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	pkg, err := os.MkdirTemp("testdata", "gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pkg) })
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(strings.Replace(blocks[0].code, addr, free, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+filepath.ToSlash(pkg)).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	url := "http://" + free + "/hello"
	var statuses []int
	var last *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for len(statuses) < 6 {
		res, err := http.Get(url)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("the README's program does not answer: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		_ = res.Body.Close()
		statuses, last = append(statuses, res.StatusCode), res
	}
	if fmt.Sprint(statuses) != "[200 200 200 200 200 429]" {
		t.Errorf("statuses %v, want [200 200 200 200 200 429], as the README says", statuses)
	}
	h := last.Header
	if h.Get("Retry-After") != "10" || h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("the 429's Retry-After %q, X-Ratelimit-Limit %q, X-Ratelimit-Remaining %q; the README says 10, 5 and 0",
			h.Get("Retry-After"), h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"))
	}
}
