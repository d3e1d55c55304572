package ratekitprom_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratekit/ratekit/ratekitprom"
)

// grafanaDashboard is a Grafana dashboard, as far as the test reads it.
type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Type       string         `json:"type"`
			Name       string         `json:"name"`
			Query      any            `json:"query"`
			Datasource *datasourceRef `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // of a collapsed row
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboardVar matches a use of a dashboard variable: $name or ${name}.
var dashboardVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// promQL returns expr with the dashboard's variables replaced as Grafana
// would: time ranges by a duration, the others (used in regular
// expression matchers) by ".*".
func promQL(expr string) string {
	return dashboardVar.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(strings.Trim(v, "${}"), "__") {
			return "5m"
		}
		return ".*"
	})
}

// labelValues matches a variable's query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

func TestDashboard(t *testing.T) {
	// The dashboard, for the default namespace, another and none: valid
	// Grafana JSON on a Prometheus data source chosen by a variable;
	// every query parsed by promtool (Prometheus 2.42) and by the
	// Prometheus parser of today, reading series ratekitprom exports with
	// the labels it uses; and every series ratekitprom exports shown.
	for _, ns := range []string{ratekitprom.DefaultNamespace, "app_limits", ""} {
		t.Run(fmt.Sprintf("namespace %q", ns), func(t *testing.T) {
			b := ratekitprom.Dashboard(ns)
			var d grafanaDashboard
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("dashboard: %v", err)
			}
			if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
				t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schemaVersion >= 36 (Grafana 9)", d.UID, d.Title, d.SchemaVersion)
			}
			series := exported(t, ratekitprom.WithNamespace(ns))
			ds := datasourceRef{Type: "prometheus", UID: "${datasource}"}
			vars := map[string]bool{}
			var exprs []string
			for _, v := range d.Templating.List {
				vars[v.Name] = true
				switch v.Type {
				case "datasource":
					if v.Name != "datasource" || v.Query != "prometheus" {
						t.Errorf("variable %s: a datasource variable of query %v, want datasource of query prometheus", v.Name, v.Query)
					}
				case "query":
					q, _ := v.Query.(string)
					m := labelValues.FindStringSubmatch(q)
					if m == nil || v.Datasource == nil || *v.Datasource != ds {
						t.Errorf("variable %s: query %v on %v, want label_values(selector, label) on %v", v.Name, v.Query, v.Datasource, ds)
						continue
					}
					checkExpr(t, "variable "+v.Name, promQL(fmt.Sprintf("count by (%s) (%s)", m[2], m[1])), series)
					exprs = append(exprs, m[1])
				default:
					t.Errorf("variable %s: type %q", v.Name, v.Type)
				}
			}
			for _, v := range []string{"datasource", "job", "instance", "policy"} {
				if !vars[v] {
					t.Errorf("no variable %s", v)
				}
			}

			ids := map[int]bool{}
			panels := d.Panels
			for i := 0; i < len(panels); i++ {
				p := panels[i]
				panels = append(panels, p.Panels...)
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if ids[p.ID] || p.ID == 0 {
					t.Errorf("%s: id missing or not unique", where)
				}
				ids[p.ID] = true
				if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("%s: gridPos %+v, want a size within the 24 columns", where, p.GridPos)
				}
				if p.Type == "row" {
					continue
				}
				if p.Datasource == nil || *p.Datasource != ds || len(p.Targets) == 0 {
					t.Errorf("%s: data source %v and %d queries, want %v and queries", where, p.Datasource, len(p.Targets), ds)
				}
				refs := map[string]bool{}
				for _, q := range p.Targets {
					if q.RefID == "" || refs[q.RefID] || q.Datasource == nil || *q.Datasource != ds {
						t.Errorf("%s: query %q: refId %q (missing or not unique) on %v", where, q.Expr, q.RefID, q.Datasource)
					}
					refs[q.RefID] = true
					for _, v := range dashboardVar.FindAllStringSubmatch(q.Expr, -1) {
						if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
							t.Errorf("%s: query %q uses $%s, which is no variable", where, q.Expr, v[1])
						}
					}
					checkExpr(t, where, promQL(q.Expr), series)
					exprs = append(exprs, promQL(q.Expr))
				}
			}

			// Every series ratekitprom exports is on the dashboard.
			shown := map[string]bool{}
			for _, e := range exprs {
				u, err := parse(e)
				if err != nil {
					continue // reported above
				}
				for _, s := range u.series {
					shown[family(series, s)] = true
				}
			}
			for _, s := range names(series) {
				if !shown[family(series, s)] {
					t.Errorf("%s is on no panel", family(series, s))
				}
			}
			if ns == ratekitprom.DefaultNamespace {
				checkPrefix(t, "dashboard.json", b, series)
			}

			// promtool parses every query, as a recording rule.
			type record struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			}
			var recs []record
			for i, e := range exprs {
				recs = append(recs, record{Record: fmt.Sprintf("dashboard:query%d", i), Expr: e})
			}
			rules, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			runPromtool(t, dir, "check", "rules", "dashboard.yml")
		})
	}
}
