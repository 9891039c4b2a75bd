package check

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// promtool returns the path of promtool (Debian's prometheus package),
// skipping the test without it unless CONCORD_REQUIRE_PROMTOOL is set
// (make test sets it, and installs the package when it can).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CONCORD_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed (Debian: apt-get install prometheus), and CONCORD_REQUIRE_PROMTOOL is set")
		}
		t.Skip("promtool is not installed (Debian: apt-get install prometheus): the alert rules and Prometheus config are not checked")
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := newChild(t, 2*time.Minute, promtool(t), args...)
	c.cmd.Dir = dir
	out, err := c.combinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAlertRules runs the rules' unit tests: for every alert, series
// that fire it and series just under its threshold that must not, with
// the labels and annotations expected.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy", "prometheus")
	t.Run("promtool", func(t *testing.T) { // skipped without promtool; the checks below are not
		runPromtool(t, dir, "check", "rules", "concord-alerts.yml")
		runPromtool(t, dir, "test", "rules", "concord-alerts_test.yml")
	})

	// Every alert is tested with series that fire it, and points at its
	// section of the runbook.
	rules := loadAlertRules(t)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, filepath.Join(dir, "concord-alerts_test.yml"), &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.AlertName] = fires[a.AlertName] || len(a.ExpAlerts) > 0
		}
	}
	runbook, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("alert %s has no test in concord-alerts_test.yml that fires it", r.Alert)
		}
		want := "https://github.com/concord-io/concord/blob/main/docs/alerts.md#" + strings.ToLower(r.Alert)
		if r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
			t.Errorf("docs/alerts.md has no section \"## %s\"", r.Alert)
		}
		for _, part := range []string{"**What it means.**", "**Confirm.**", "**What to do.**"} {
			sec := section(string(runbook), r.Alert)
			if !strings.Contains(sec, part) {
				t.Errorf("docs/alerts.md, %s: no %s", r.Alert, part)
			}
		}
	}
}

// section is the text of the runbook's section "## name", up to the next
// "## ".
func section(doc, name string) string {
	_, after, ok := strings.Cut(doc, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	sec, _, _ := strings.Cut(after, "\n## ")
	return sec
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "concord-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("concord-alerts.yml: %v", err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("concord-alerts.yml holds no rules")
	}
	return rules
}

// dashboard is what the check reads of a Grafana dashboard's JSON.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dashDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource *dashDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "concord.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("concord.json is not JSON a dashboard reads: %v", err)
	}
	return d
}

// grafanaVars stands in for the dashboard's variables and Grafana's own,
// so that a query parses as Prometheus would get it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$job", grafanaJob, "$instance", ".*")

// grafanaJob is what $job stands for in a checked query.
const grafanaJob = "concord"

// TestDashboard checks the dashboard's JSON: a title, uid and schema
// version; a Prometheus datasource variable and job (cluster) and
// instance variables; panels with unique ids and grid positions, every
// one on the datasource variable; and every query a PromQL expression
// that Prometheus's own parser takes.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and a current schema", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" {
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("variable %s does not query the datasource variable", v.Name)
			}
		}
	}
	if vars["datasource"] != "datasource" || vars["job"] != "query" || vars["instance"] != "query" {
		t.Errorf("variables %v: want datasource (a datasource), job and instance (queries)", vars)
	}
	ids := map[int]string{}
	var queries int
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if other, ok := ids[p.ID]; ok {
				t.Errorf("panels %q and %q share id %d", p.Title, other, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Title == "" || p.Type == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %d %q: want a title, a type and a grid position", p.ID, p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q is not on the datasource variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				if _, err := parsePromQL(grafanaVars.Replace(q.Expr)); err != nil {
					t.Errorf("panel %q, query %s: %v", p.Title, q.RefID, err)
					continue
				}
				// Every selector of the query, not just one of them.
				for _, vs := range selectors(t, "panel "+p.Title, grafanaVars.Replace(q.Expr)) {
					if !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
						return m.Name == "job" && m.Type == labels.MatchEqual && m.Value == grafanaJob
					}) {
						t.Errorf("panel %q, query %s: %s is not limited to the chosen cluster (job=\"$job\")", p.Title, q.RefID, vs)
					}
				}
			}
		}
	}
	walk(d.Panels)
	if queries < 20 {
		t.Errorf("only %d queries", queries)
	}
}

func parsePromQL(expr string) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(expr)
}

// selectors returns the series selectors of expr.
func selectors(t *testing.T, what, expr string) []*parser.VectorSelector {
	t.Helper()
	e, err := parsePromQL(expr)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// TestMonitoringCompose checks the compose file's monitoring profile:
// Prometheus with the rules and a config promtool accepts, Grafana with
// the datasource and the dashboard provisioned, every file they mount in
// the repository, and the services' addresses as the configs name them.
func TestMonitoringCompose(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy")
	p := loadCompose(t, "monitoring")
	prom, ok := p.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service in the monitoring profile")
	}
	graf, ok := p.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service in the monitoring profile")
	}
	mounts := map[string]string{} // target in the container → file here
	for _, s := range []types.ServiceConfig{prom, graf} {
		if !slices.Equal(s.Profiles, []string{"monitoring"}) {
			t.Errorf("%s: profiles %v, want [monitoring] (the cluster alone must not need it)", s.Name, s.Profiles)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s, which is not in the repository: %v", s.Name, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("%s mounts %s writable", s.Name, v.Source)
			}
			mounts[v.Target] = v.Source
		}
	}
	cfg, ok := mounts["/etc/prometheus/prometheus.yml"]
	if !ok || !slices.Contains(prom.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Fatalf("prometheus does not run with the mounted deploy/prometheus/prometheus.yml (command %v)", prom.Command)
	}
	if mounts["/etc/prometheus/concord-alerts.yml"] != filepath.Join(dir, "prometheus", "concord-alerts.yml") {
		t.Error("prometheus does not mount the alert rules beside its config")
	}
	t.Run("promtool", func(t *testing.T) { // skipped without promtool; the checks below are not
		runPromtool(t, filepath.Dir(cfg), "check", "config", filepath.Base(cfg))
	})

	// Prometheus scrapes each node's metrics listener by service name.
	var promCfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, cfg, &promCfg)
	var targets []string
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		m, _ := flagValue(p.Services[name].Command, "metrics-listen")
		want := fmt.Sprintf("%s:%d", name, portOf(t, m))
		if !slices.Contains(targets, want) {
			t.Errorf("prometheus.yml scrapes %v, not %s (%s's --metrics-listen)", targets, want, name)
		}
	}
	if !slices.Contains(promCfg.RuleFiles, "concord-alerts.yml") {
		t.Errorf("prometheus.yml loads rules %v, not concord-alerts.yml", promCfg.RuleFiles)
	}

	// Grafana: the provisioned datasource is the compose Prometheus, and
	// the dashboard provider reads the directory the dashboard is in.
	prov, ok := mounts["/etc/grafana/provisioning"]
	if !ok {
		t.Fatal("grafana does not mount deploy/grafana/provisioning")
	}
	var ds struct {
		Datasources []struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"datasources"`
	}
	readYAML(t, filepath.Join(prov, "datasources", "prometheus.yaml"), &ds)
	promPort := 0
	for _, port := range prom.Ports {
		promPort = int(port.Target)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != fmt.Sprintf("http://prometheus:%d", promPort) {
		t.Errorf("grafana datasources %+v: want the compose prometheus at http://prometheus:%d", ds.Datasources, promPort)
	}
	var dp struct {
		Providers []struct {
			Type    string `json:"type"`
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	readYAML(t, filepath.Join(prov, "dashboards", "concord.yaml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("grafana dashboard providers %+v: want one file provider", dp.Providers)
	}
	dash := filepath.Join(dp.Providers[0].Options.Path, "concord.json")
	if mounts[dash] != filepath.Join(dir, "grafana", "concord.json") {
		t.Errorf("grafana mounts %q at %s, where its provider looks; want deploy/grafana/concord.json", mounts[dash], dash)
	}
}

// scrapeFamilies returns the metric families a node's /metrics serves.
func scrapeFamilies(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestMonitoringNamesExportedMetrics runs the compose cluster's three
// nodes, has them do what makes every series appear (grants and
// keep-alives, a keep-alive of an unknown lease, a request whose reply
// subject is refused, a tenant with a quota), scrapes them, and checks
// that every metric an alert rule or a dashboard query names is one they
// export: a renamed metric fails here, not in an operator's silent alert.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	p := loadCompose(t)
	_, urls, metrics := startComposeCluster(t, p)

	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := func(subject, body string, header nats.Header) *nats.Msg {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: []byte(body), Header: header}
		r, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", subject, body, err)
		}
		return r
	}
	grant := req("concord.lease.grant", `{"ttl":60}`, nil)
	var g struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(grant.Data, &g); err != nil || g.ID == 0 {
		t.Fatalf("grant: %s", grant.Data)
	}
	req("concord.kv.put", fmt.Sprintf(`{"key":"k","value":1,"lease":%d}`, g.ID), nil)
	req("concord.lease.keepalive", fmt.Sprintf(`{"id":%d}`, g.ID), nil)
	if r := req("concord.lease.keepalive", `{"id":999999}`, nil); r.Header.Get("Nats-Service-Error-Code") != "404" {
		t.Fatalf("keep-alive of an unknown lease: %s", r.Data)
	}
	// A reply subject a reply may not go to: dropped and counted.
	if err := nc.PublishMsg(&nats.Msg{Subject: "concord.kv.get", Reply: "concord.kv.put", Data: []byte(`{"key":"k"}`)}); err != nil {
		t.Fatal(err)
	}
	// A tenant (the header the NATS server writes across an import, here
	// from Concord's own account) with a quota.
	tenant := nats.Header{"Nats-Request-Info": []string{`{"acc":"TENANT_M"}`}}
	req("concord.kv.put", `{"key":"t","value":1}`, tenant)
	out, err := newChild(t, 30*time.Second, concordBin, "tenant", "quota", "TENANT_M", "--keys", "10", "--leases", "10", "--value-bytes", "1000", "--server", urls[0]).combinedOutput()
	if err != nil {
		t.Fatalf("concord tenant quota: %v\n%s", err, out)
	}

	exported := map[string]bool{}
	families := map[string]*dto.MetricFamily{} // every node's series of a name together
	checkFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		clear(families)
		for _, addr := range metrics {
			for name, f := range scrapeFamilies(t, addr) {
				exported[name] = true
				if families[name] == nil {
					families[name] = f
				} else {
					families[name].Metric = append(families[name].Metric, f.Metric...)
				}
			}
		}
		for _, want := range []string{"concord_requests_refused_reply_total", "concord_tenant_quota", "raft_rpc_appendEntries_storeLogs", "concord_request_errors_total"} {
			if !exported[want] {
				return fmt.Errorf("%s not exported yet", want)
			}
		}
		return nil
	})

	type use struct {
		where string
		vs    *parser.VectorSelector
	}
	var uses []use
	names := map[string]bool{}
	for _, r := range loadAlertRules(t) {
		for _, vs := range selectors(t, "alert "+r.Alert, r.Expr) {
			uses = append(uses, use{"alert " + r.Alert, vs})
		}
	}
	d := loadDashboard(t)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if v.Type != "query" || json.Unmarshal(v.Query, &q) != nil {
			continue
		}
		// label_values(selector, label): the selector is what must exist.
		sel, ok := strings.CutPrefix(q.Query, "label_values(")
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(...)", v.Name, q.Query)
			continue
		}
		sel = sel[:strings.LastIndex(sel, ",")]
		for _, vs := range selectors(t, "variable "+v.Name, grafanaVars.Replace(sel)) {
			uses = append(uses, use{"variable " + v.Name, vs})
		}
	}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, q := range p.Targets {
				for _, vs := range selectors(t, "panel "+p.Title, grafanaVars.Replace(q.Expr)) {
					uses = append(uses, use{"panel " + p.Title, vs})
				}
			}
		}
	}
	walk(d.Panels)
	for _, u := range uses {
		names[u.vs.Name] = true
	}
	if len(names) < 30 {
		t.Fatalf("only %d metric names found in the rules and the dashboard", len(names))
	}
	for _, u := range uses {
		if prometheusOwn[u.vs.Name] {
			continue
		}
		fam := families[familyOf(u.vs.Name, exported)]
		if fam == nil {
			t.Errorf("%s, used by %s, is not exported by a running node", u.vs.Name, u.where)
			continue
		}
		// Each label a selector names is one the metric has, and a value
		// it asks for by equality is one a node exports: a renamed label
		// or value would silence a rule as surely as a renamed metric.
		for _, m := range u.vs.LabelMatchers {
			if m.Name == model.MetricNameLabel || m.Name == "job" || m.Name == "instance" || m.Name == "le" {
				continue
			}
			if !slices.ContainsFunc(fam.Metric, func(s *dto.Metric) bool { return hasLabel(s, m) }) {
				t.Errorf("%s, used by %s: no exported series has %s", u.vs.Name, u.where, m)
			}
		}
	}
}

// hasLabel reports whether series s has the label m names, with the
// value m asks for when it asks by equality. A summary's quantiles are
// labels to Prometheus, and values of their own in the parsed scrape.
func hasLabel(s *dto.Metric, m *labels.Matcher) bool {
	if m.Name == model.QuantileLabel && s.Summary != nil {
		want, err := strconv.ParseFloat(m.Value, 64)
		return m.Type != labels.MatchEqual || err == nil && slices.ContainsFunc(s.Summary.Quantile, func(q *dto.Quantile) bool {
			return q.GetQuantile() == want
		})
	}
	return slices.ContainsFunc(s.Label, func(l *dto.LabelPair) bool {
		return l.GetName() == m.Name && (m.Type != labels.MatchEqual || l.GetValue() == m.Value)
	})
}

// prometheusOwn names the series Prometheus makes itself for every
// target, which no node exports.
var prometheusOwn = map[string]bool{"up": true}

// familyOf maps a histogram's or summary's series name (_bucket, _sum,
// _count) to its family when the family is exported.
func familyOf(name string, exported map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
			return base
		}
	}
	return name
}
